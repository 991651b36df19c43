# Build options CI uses to hold the code to its habits:
#   MNIST_WERROR=ON                    warnings in the project's own C++ are errors (not in nvcc's host
#                                      passes: nvcc's generated stubs warn in ways we do not control)
#   MNIST_SANITIZE=address,undefined   AddressSanitizer + UndefinedBehaviorSanitizer
#   MNIST_SANITIZE=thread              ThreadSanitizer (coordinator, barriers, watchdog, signal handling)
# Sanitized builds are CPU-only: the sanitizer runtimes do not see into the CUDA driver, and CUDA's
# runtime is known to trip ASan's leak and TSan's race reports on its own threads.
option(MNIST_WERROR "Treat warnings in the project's C++ as errors" OFF)
set(MNIST_SANITIZE "" CACHE STRING "Sanitizers: empty, address,undefined, or thread")

if(MNIST_WERROR)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-Werror>")
endif()

if(MNIST_SANITIZE)
  set(allowed "address;undefined;thread")
  string(REPLACE "," ";" wanted "${MNIST_SANITIZE}")
  foreach(s ${wanted})
    if(NOT s IN_LIST allowed)
      message(FATAL_ERROR "MNIST_SANITIZE=${MNIST_SANITIZE}: '${s}' is not one of address, undefined, thread")
    endif()
  endforeach()
  if("thread" IN_LIST wanted AND ("address" IN_LIST wanted))
    message(FATAL_ERROR "MNIST_SANITIZE=${MNIST_SANITIZE}: ThreadSanitizer cannot be combined with AddressSanitizer")
  endif()
  if(NOT MNIST_CUDA STREQUAL "OFF" OR NOT MNIST_MPI STREQUAL "OFF")
    message(FATAL_ERROR "MNIST_SANITIZE needs -DMNIST_CUDA=OFF -DMNIST_MPI=OFF (sanitized builds are CPU-only)")
  endif()
  # -O1 and line tables only (-g1), whatever the build type (these come after its -O2 -g, so they
  # win; the type still decides NDEBUG): the sanitizers' documentation asks for -O1 or more, and a
  # report needs no more than file:line per frame. The sanitizer jobs were most of CI's time, nearly
  # all of it compiling: `MNIST_TEST_JOBS=asan scripts/test.sh` took 842 s at -O2 -g and 404 s at
  # -O1 -g1 on a 2-core machine (GCC 12).
  set(flags "-fsanitize=${MNIST_SANITIZE};-fno-omit-frame-pointer;-O1;-g1")
  # GCC 12's flow analysis on ASan-instrumented code reports -Wmaybe-uninitialized inside
  # libstdc++'s <regex> (std::function members of its NFA states), a false positive in a system
  # header; it stays a warning there instead of failing the -Werror build.
  list(APPEND flags "-Wno-error=maybe-uninitialized")
  if("undefined" IN_LIST wanted)
    # A UB finding fails the test that caused it instead of scrolling past in the log.
    list(APPEND flags "-fno-sanitize-recover=undefined")
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${flags}>")
  add_link_options(${flags})
endif()
