# The aarch64 executor beside this build: when the packages of `scripts/install-deps.sh
# --aarch64` are present (COURIER_AARCH64=AUTO) or asked for (ON), the build also cross-builds
# courier-executor, courier-worker and the `call` test plugin for aarch64 into
# ${CMAKE_BINARY_DIR}/aarch64 (cmake/aarch64-linux-gnu.cmake, the same build as
# scripts/build-aarch64-executor.sh), and the tests labelled "cross" run them under qemu-user.
# Sets COURIER_AARCH64_EXECUTOR, COURIER_AARCH64_WORKER and COURIER_AARCH64_PLUGIN, and the target
# courier-aarch64-executor that builds them.
set(COURIER_AARCH64 AUTO CACHE STRING
    "Cross-build the aarch64 executor and run its tests under qemu: AUTO, ON or OFF")
set_property(CACHE COURIER_AARCH64 PROPERTY STRINGS AUTO ON OFF)

set(courier_aarch64_needs
  /usr/lib/aarch64-linux-gnu/crt1.o
  /usr/lib/gcc/aarch64-linux-gnu/12/libstdc++.so
  /usr/lib/aarch64-linux-gnu/libLLVM-${LLVM_VERSION_MAJOR}.so
  /usr/lib/aarch64-linux-gnu/libcpp-httplib.so
  /usr/lib/aarch64-linux-gnu/libseccomp.so
  /usr/lib/aarch64-linux-gnu/libssl.so
  /usr/lib/aarch64-linux-gnu/libprometheus-cpp-core.so.1.0)
set(courier_aarch64_missing)
foreach(file ${courier_aarch64_needs})
  if(NOT EXISTS ${file})
    list(APPEND courier_aarch64_missing ${file})
  endif()
endforeach()
find_program(COURIER_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64)
if(NOT COURIER_QEMU_AARCH64)
  list(APPEND courier_aarch64_missing qemu-aarch64-static)
endif()

set(COURIER_AARCH64_ENABLED OFF)
if(COURIER_AARCH64 STREQUAL "ON")
  if(courier_aarch64_missing)
    list(JOIN courier_aarch64_missing ", " missing)
    message(FATAL_ERROR "COURIER_AARCH64=ON, but ${missing} is missing: "
                        "scripts/install-deps.sh --aarch64 installs it")
  endif()
  set(COURIER_AARCH64_ENABLED ON)
elseif(COURIER_AARCH64 STREQUAL "AUTO")
  # A sanitized build tests the host's code; the cross tests exercise the same host paths as
  # the normal build's do, at the price of a second cross build.
  if(NOT courier_aarch64_missing AND NOT COURIER_SANITIZE)
    set(COURIER_AARCH64_ENABLED ON)
  endif()
elseif(NOT COURIER_AARCH64 STREQUAL "OFF")
  message(FATAL_ERROR "COURIER_AARCH64 is AUTO, ON or OFF, not '${COURIER_AARCH64}'")
endif()

if(NOT COURIER_AARCH64_ENABLED)
  message(STATUS "aarch64 executor and its tests: off "
                 "(scripts/install-deps.sh --aarch64 installs what they need)")
  return()
endif()

include(ExternalProject)
set(courier_aarch64_dir ${CMAKE_BINARY_DIR}/aarch64)
set(COURIER_AARCH64_EXECUTOR ${courier_aarch64_dir}/bin/courier-executor)
set(COURIER_AARCH64_WORKER ${courier_aarch64_dir}/bin/courier-worker)
set(COURIER_AARCH64_PLUGIN ${courier_aarch64_dir}/lib/libcourier_test_plugin.so)
# BUILD_ALWAYS: the cross build's own Ninja decides what an edit to the executor rebuilds.
ExternalProject_Add(courier-aarch64-executor
  SOURCE_DIR ${PROJECT_SOURCE_DIR}
  BINARY_DIR ${courier_aarch64_dir}
  CMAKE_GENERATOR Ninja
  CMAKE_ARGS -DCMAKE_TOOLCHAIN_FILE=${PROJECT_SOURCE_DIR}/cmake/aarch64-linux-gnu.cmake
             -DCMAKE_BUILD_TYPE=Release
  BUILD_ALWAYS ON
  INSTALL_COMMAND ""
  BUILD_BYPRODUCTS ${COURIER_AARCH64_EXECUTOR} ${COURIER_AARCH64_WORKER} ${COURIER_AARCH64_PLUGIN})
message(STATUS "aarch64 executor: ${COURIER_AARCH64_EXECUTOR}, run by ${COURIER_QEMU_AARCH64}")
