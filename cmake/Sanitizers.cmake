# Sanitized and fuzzing builds (docs/reliability.md). COURIER_SANITIZE instruments everything
# built with AddressSanitizer and UndefinedBehaviorSanitizer; COURIER_FUZZ adds libFuzzer's
# coverage instrumentation on top and defines the fuzz targets of tests/fuzz. Both need clang.
option(COURIER_SANITIZE "Build with -fsanitize=address,undefined" OFF)
option(COURIER_FUZZ "Build the libFuzzer targets of tests/fuzz (implies COURIER_SANITIZE)" OFF)
if(COURIER_FUZZ)
  set(COURIER_SANITIZE ON)
endif()

if(COURIER_SANITIZE)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "COURIER_SANITIZE and COURIER_FUZZ need clang (clang++-22), not "
                        "${CMAKE_CXX_COMPILER_ID}")
  endif()
  # Without UBSan's `function` check: on a call through a function pointer it reads the
  # type hash instrumented code keeps just before a function, and JIT'd code has none; a
  # JIT'd function at the start of its mapping (an empty setup() at O2) faults the read.
  set(courier_sanitize_flags -fsanitize=address,undefined -fno-sanitize=function
      -fno-omit-frame-pointer)
  if(COURIER_FUZZ)
    # Coverage for the fuzzers' guidance; the fuzz targets alone add -fsanitize=fuzzer,
    # which brings libFuzzer's main().
    list(APPEND courier_sanitize_flags -fsanitize=fuzzer-no-link)
  endif()
  add_compile_options(${courier_sanitize_flags})
  add_link_options(-fsanitize=address,undefined -fno-sanitize=function)
endif()

# Every executable links tests/sanitizers/SanitizerOptions.c, the runtime's defaults: a test,
# a server or a worker started with any environment still runs with the options the suite
# needs. Added once every directory has declared its targets.
if(COURIER_SANITIZE)
  find_program(COURIER_LLVM_SYMBOLIZER llvm-symbolizer HINTS ${LLVM_TOOLS_BINARY_DIR} REQUIRED)
  add_library(CourierSanitizerOptions OBJECT ${PROJECT_SOURCE_DIR}/tests/sanitizers/SanitizerOptions.c)
  target_compile_definitions(CourierSanitizerOptions PRIVATE
    COURIER_LLVM_SYMBOLIZER="${COURIER_LLVM_SYMBOLIZER}"
    COURIER_LSAN_SUPPRESSIONS="${PROJECT_SOURCE_DIR}/tests/sanitizers/lsan.supp")

  function(courier_link_sanitizer_options dir)
    get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
    foreach(target ${targets})
      get_target_property(type ${target} TYPE)
      if(type STREQUAL "EXECUTABLE")
        target_sources(${target} PRIVATE $<TARGET_OBJECTS:CourierSanitizerOptions>)
      endif()
    endforeach()
    get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
    foreach(subdir ${subdirs})
      courier_link_sanitizer_options(${subdir})
    endforeach()
  endfunction()
  cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR}
                 CALL courier_link_sanitizer_options ${PROJECT_SOURCE_DIR})
endif()
