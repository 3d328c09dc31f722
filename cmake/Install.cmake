# The install tree an application builds against (samples/05-embedding does, with CMake and
# with pkg-config):
#   include/courier/   Engine.h, Tensor.h, ExecutorABI.h, Version.h and the headers they
#                      include, each at its path in this tree below courier/
#   lib/               the engine's static libraries
#   lib/cmake/Courier/ CourierConfig.cmake, CourierConfigVersion.cmake (SameMajorVersion),
#                      CourierTargets.cmake: Courier::Engine and Courier::Runtime, relocatable
#   lib/pkgconfig/     courier.pc (the engine) and courier-runtime.pc (the runtime alone),
#                      relocatable too
#   bin/               the tools
#   share/doc/courier/ LICENSE, README.md, the docs/ pages and the generated dialect and pass
#                      reference (dialects/, passes/)
# The tree may be moved after installing: nothing in it names the prefix, except the last
# place an isolated engine looks for courier-module-worker (after $COURIER_MODULE_WORKER and
# the application's own directory; EngineOptions::workerProgram).
include(CMakePackageConfigHelpers)

# Three components, each an export set of its own, so that an application asks only for what
# it links (find_package(Courier COMPONENTS ...); all three when it names none):
#   Runtime   Courier::Runtime, the C ABI lowered host code calls (runtime/ExecutorABI.h),
#             with the HTTP client for remote executors: LLVM, OpenSSL and cpp-httplib.
#   Executor  Courier::Executor, the in-process executor ("local" for the runtime) and the
#             executor server: adds libseccomp, prometheus-cpp and LLVM's OpenMP runtime.
#   Engine    Courier::Engine, the engine with everything under it: adds MLIR.
# The other targets are what those are made of, exported because static libraries carry their
# dependencies along.
set(courier_exported
  Runtime  "CourierRuntime Runtime CourierTransport Transport CourierAbi Abi"
  Executor "CourierExecutor Executor CourierHttpServer HttpServer"
  Engine   "CourierJit Engine CourierPasses Passes CourierDialect Dialect")
while(courier_exported)
  list(POP_FRONT courier_exported component targets)
  separate_arguments(targets)
  set(installed)
  while(targets)
    list(POP_FRONT targets target name)
    set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
    list(APPEND installed ${target})
  endwhile()
  install(TARGETS ${installed} EXPORT Courier${component}Targets
    ARCHIVE DESTINATION lib
    INCLUDES DESTINATION include)
  install(EXPORT Courier${component}Targets NAMESPACE Courier:: DESTINATION lib/cmake/Courier)
endwhile()
# The headers are C++17.
target_compile_features(CourierJit INTERFACE cxx_std_17)
target_compile_features(CourierRuntime INTERFACE cxx_std_17)

# Public headers under one prefix. Each includes the others by a path that resolves from its
# own directory once installed (jit/Engine.h includes "Tensor.h" and "transport/ErrorCode.h",
# runtime/ExecutorABI.h "abi/KernelABI.h"), so they are installed at those paths.
install(FILES jit/Engine.h jit/Tensor.h runtime/ExecutorABI.h ${PROJECT_BINARY_DIR}/Version.h
  DESTINATION include/courier)
install(FILES transport/BackendOptions.h transport/ErrorCode.h transport/Isolation.h transport/SharedMemoryMode.h transport/TlsOptions.h
  DESTINATION include/courier/transport)
install(FILES abi/KernelABI.h DESTINATION include/courier/abi)

# MLIR is found as the application's build finds it (MLIR_DIR, CMAKE_PREFIX_PATH, the
# default places), at the major and minor version the libraries were built with; the place
# this build found it is only the last one looked at.
set(COURIER_LLVM_VERSION ${LLVM_VERSION_MAJOR}.${LLVM_VERSION_MINOR})
configure_package_config_file(cmake/CourierConfig.cmake.in
  ${PROJECT_BINARY_DIR}/CourierConfig.cmake INSTALL_DESTINATION lib/cmake/Courier)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/CourierConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/CourierConfig.cmake
  ${PROJECT_BINARY_DIR}/CourierConfigVersion.cmake DESTINATION lib/cmake/Courier)

# pkg-config: the engine's libraries in link order, after the symbol that links in the
# in-process executor (executor/CMakeLists.txt), then those of the packages they use. LLVM
# and MLIR have no .pc file; their directories are this build's.
set(COURIER_PC_LIBS " -Wl,--undefined=courier_in_process_executor")
foreach(lib CourierJit CourierPasses CourierDialect CourierRuntime CourierExecutor
    CourierHttpServer CourierTransport)
  string(APPEND COURIER_PC_LIBS " -l${lib}")
endforeach()
# What the executor library's runtime symbol table takes its addresses from: the compiler's
# runtime helpers (an archive, by path) and MLIR's runner utilities (in LLVM's directory).
string(APPEND COURIER_PC_LIBS " ${COURIER_BUILTINS_LIBRARY}")
if(TARGET mlir_runner_utils AND TARGET mlir_c_runner_utils)
  string(APPEND COURIER_PC_LIBS " -L${LLVM_LIBRARY_DIR} -lmlir_runner_utils -lmlir_c_runner_utils")
endif()
set(COURIER_PC_CFLAGS "")
foreach(dir ${LLVM_INCLUDE_DIRS})
  string(APPEND COURIER_PC_CFLAGS " -isystem ${dir}")
endforeach()
configure_file(cmake/courier.pc.in ${PROJECT_BINARY_DIR}/courier.pc @ONLY)
# courier-runtime.pc: the runtime alone (the C ABI with the HTTP client), as the Runtime
# component of the CMake package.
configure_file(cmake/courier-runtime.pc.in ${PROJECT_BINARY_DIR}/courier-runtime.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/courier.pc ${PROJECT_BINARY_DIR}/courier-runtime.pc
  DESTINATION lib/pkgconfig)

# The documentation (component "doc", part of every install): the README, docs/*.md and the
# generated reference of Courier's dialects and passes, which the pages link to by these
# relative paths.
install(FILES LICENSE README.md docs/deploy.md docs/design.md docs/guide.md docs/performance.md
  docs/protocol.md docs/reliability.md docs/rest.md docs/writing.md
  DESTINATION share/doc/courier COMPONENT doc)
install(DIRECTORY ${PROJECT_BINARY_DIR}/docs/dialects ${PROJECT_BINARY_DIR}/docs/passes
  DESTINATION share/doc/courier COMPONENT doc FILES_MATCHING PATTERN "*.md")

foreach(tool courier-opt courier-run courier-executor courier-worker courier-module-worker
    courier-serve)
  if(TARGET ${tool})
    install(TARGETS ${tool} RUNTIME DESTINATION bin)
  endif()
endforeach()
