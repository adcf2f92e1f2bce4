# libFuzzer targets (MESHTRAIN_FUZZ=ON, clang only). Filled in by the fuzzing work.
function(meshtrain_add_fuzzer name)
endfunction()
