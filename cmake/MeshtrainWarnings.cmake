# Warnings and sanitizers shared by every meshtrain target.
# defines: meshtrain_warnings (interface target)
add_library(meshtrain_warnings INTERFACE)
target_compile_options(meshtrain_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
# MESHTRAIN_SANITIZE (the asan preset: clang 16, -O1 -g): AddressSanitizer with its leak checker, and
# UBSan stopping at the first report. The libraries build at -O1 (the level ASan documents for
# usable speed: the tests' time is in our kernels), the test executables at -O0 (their GoogleTest
# bodies compile 2-3x faster; cmake/MeshtrainTesting.cmake). Frame pointers keep report stacks whole.
if(MESHTRAIN_SANITIZE)
  target_compile_options(meshtrain_warnings INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined>)
  target_link_options(meshtrain_warnings INTERFACE -fsanitize=address,undefined)
endif()
