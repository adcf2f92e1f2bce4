# Warnings and sanitizers shared by every meshtrain target.
add_library(meshtrain_warnings INTERFACE)
target_compile_options(meshtrain_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
if(MESHTRAIN_SANITIZE)
  target_compile_options(meshtrain_warnings INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined>)
  target_link_options(meshtrain_warnings INTERFACE -fsanitize=address,undefined)
endif()
