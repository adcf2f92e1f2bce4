# Included from data/CMakeLists.txt: llm.c token shards, the deterministic loader, corpus preparation.
add_library(meshtrain_data
  shard.cpp               # write_shard, ShardFile (mmap), read_shard, find_shards
  loader.cpp              # DataLoader, window_permutation
  prepare.cpp             # prepare_corpus(options, tokenizer), split_documents, default_corpus_files
  prepare_tokenizer.cpp)  # prepare_corpus(options): makes the tokenizer by name
target_link_libraries(meshtrain_data PUBLIC meshtrain_tokenizer meshtrain_runtime PRIVATE meshtrain_warnings)

if(MESHTRAIN_TESTS)
  add_subdirectory(tests)
endif()
