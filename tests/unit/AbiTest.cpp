// The declarations convert-executor-to-llvm emits must match runtime/ExecutorABI.h.
#include "passes/Passes.h"
#include "runtime/ExecutorABI.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/InitAllDialects.h"
#include "mlir/Parser/Parser.h"

#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <type_traits>

namespace {

/// How a C type of the ABI appears in an LLVM function type.
template <typename T> std::string llvmName() {
  if constexpr (std::is_void_v<T>)
    return "void";
  else if constexpr (std::is_pointer_v<T>)
    return "ptr";
  else if constexpr (std::is_integral_v<T>)
    return "i" + std::to_string(sizeof(T) * 8);
  else
    static_assert(sizeof(T) == 0, "type not used by the ABI");
}

template <typename F> struct Signature;
template <typename R, typename... Args> struct Signature<R(Args...)> {
  static std::string text() {
    std::string params;
    ((params += (params.empty() ? "" : ", ") + llvmName<Args>()), ...);
    return llvmName<R>() + " (" + params + ")";
  }
};

#define COURIER_ABI_ENTRY(name)                                                                    \
  { #name, Signature < decltype(name)> ::text() }

const std::map<std::string, std::string> kHeader = {
    COURIER_ABI_ENTRY(__catalyst__executor__open),
    COURIER_ABI_ENTRY(__catalyst__executor__send_binary),
    COURIER_ABI_ENTRY(__catalyst__executor__launch),
    COURIER_ABI_ENTRY(__catalyst__executor__launch_async),
    COURIER_ABI_ENTRY(__catalyst__executor__await),
    COURIER_ABI_ENTRY(__catalyst__executor__call_wrapper),
    COURIER_ABI_ENTRY(__catalyst__executor__free_result),
    COURIER_ABI_ENTRY(__catalyst__executor__close),
};

/// Catalyst's ExecutorCAPI.h, prototype for prototype: host code lowered by Catalyst's
/// compiler calls these, so the runtime must define exactly them.
namespace catalyst_capi {
using Open = int64_t(const char *addr);
using SendBinary = int64_t(int64_t session, const char *path, uint32_t format);
using Launch = void(int64_t session, const char *entry_symbol, const char *object,
                    size_t num_inputs, void *const *input_descs, const size_t *input_ranks,
                    const size_t *input_elem_sizes, size_t num_outputs, void *const *output_descs,
                    const size_t *output_ranks, const size_t *output_elem_sizes);
using LaunchAsync = int64_t(int64_t session, const char *entry_symbol, const char *object);
using Await = void(int64_t token);
using CallWrapper = int32_t(int64_t session, const char *symbol, const char *args_buf,
                            size_t args_size, void **out_buf, size_t *out_size);
using FreeResult = void(void *buf);
using Close = int64_t(int64_t session);
} // namespace catalyst_capi

static_assert(std::is_same_v<decltype(__catalyst__executor__open), catalyst_capi::Open>);
static_assert(
    std::is_same_v<decltype(__catalyst__executor__send_binary), catalyst_capi::SendBinary>);
static_assert(std::is_same_v<decltype(__catalyst__executor__launch), catalyst_capi::Launch>);
static_assert(
    std::is_same_v<decltype(__catalyst__executor__launch_async), catalyst_capi::LaunchAsync>);
static_assert(std::is_same_v<decltype(__catalyst__executor__await), catalyst_capi::Await>);
static_assert(
    std::is_same_v<decltype(__catalyst__executor__call_wrapper), catalyst_capi::CallWrapper>);
static_assert(
    std::is_same_v<decltype(__catalyst__executor__free_result), catalyst_capi::FreeResult>);
static_assert(std::is_same_v<decltype(__catalyst__executor__close), catalyst_capi::Close>);

const char *kEveryOp = R"mlir(
func.func @all(%x: memref<4xf32>, %in: memref<8xi8>, %out: memref<4xf32>) -> memref<4xf32> {
  %s = executor.open("h:7000") : !executor.session
  executor.send_binary %s("/w/k.o") : !executor.session
  %r = executor.launch %s("scale", "/w/k.o") (%x) : !executor.session, (memref<4xf32>) -> memref<4xf32>
  %t = executor.launch_async %s("serve", "/w/k.o") : !executor.session -> !executor.token
  executor.await %t : !executor.token
  executor.call %s("sym") (%in, %out) {num_input_args = 1 : i32} : !executor.session, (memref<8xi8>, memref<4xf32>) -> ()
  executor.close %s : !executor.session
  return %r : memref<4xf32>
}
)mlir";

/// Formats an LLVM function type as "result (param, ...)".
std::string text(mlir::LLVM::LLVMFunctionType type) {
  auto name = [](mlir::Type t) -> std::string {
    if (llvm::isa<mlir::LLVM::LLVMVoidType>(t))
      return "void";
    if (llvm::isa<mlir::LLVM::LLVMPointerType>(t))
      return "ptr";
    return "i" + std::to_string(t.getIntOrFloatBitWidth());
  };
  std::string params;
  for (mlir::Type param : type.getParams())
    params += (params.empty() ? "" : ", ") + name(param);
  return name(type.getReturnType()) + " (" + params + ")";
}

} // namespace

TEST_CASE("the runtime declarations the lowering emits match the ABI header", "[abi]") {
  mlir::DialectRegistry registry;
  mlir::registerAllDialects(registry);
  courier::registerCourierDialects(registry);
  mlir::MLIRContext context(registry);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(kEveryOp, &context);
  REQUIRE(module);
  mlir::PassManager pm(&context, mlir::ModuleOp::getOperationName());
  pm.addPass(courier::createConvertExecutorToLLVM());
  REQUIRE(mlir::succeeded(pm.run(*module)));

  std::map<std::string, std::string> lowered;
  for (auto fn : module->getOps<mlir::LLVM::LLVMFuncOp>())
    if (fn.getName().starts_with("__catalyst__executor__"))
      lowered[fn.getName().str()] = text(fn.getFunctionType());

  CHECK(lowered == kHeader);
  for (const auto &[name, signature] : kHeader) {
    INFO(name);
    CHECK(lowered[name] == signature);
  }
}
