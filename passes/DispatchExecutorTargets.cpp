// dispatch-executor-targets: open sessions and ship objects in setup(), rewrite kernel
// launches into executor.launch, and drop the shipped modules from the host.
#include "passes/Passes.h"
#include "passes/TargetModules.h"

namespace courier {
#define GEN_PASS_DEF_DISPATCHEXECUTORTARGETS
#include "passes/Passes.h.inc"
} // namespace courier

using namespace mlir;

namespace courier {
namespace {

constexpr StringLiteral kSetupName = "setup";

struct DispatchedModule {
  ModuleOp module;
  std::string address;
  std::string objectFile;
};

/// The host's `setup()`, created (public, empty) if missing.
FailureOr<func::FuncOp> getOrCreateSetup(ModuleOp host) {
  if (Operation *existing = SymbolTable::lookupSymbolIn(host, kSetupName)) {
    auto setup = dyn_cast<func::FuncOp>(existing);
    if (!setup || setup.isExternal() || setup.getNumArguments() != 0 || setup.getNumResults() != 0)
      return existing->emitError("'setup' must be a defined func.func taking and returning "
                                 "nothing, to hold the executor set-up");
    return setup;
  }
  OpBuilder builder = OpBuilder::atBlockEnd(host.getBody());
  auto setup =
      func::FuncOp::create(builder, host.getLoc(), kSetupName, builder.getFunctionType({}, {}));
  OpBuilder body = OpBuilder::atBlockBegin(setup.addEntryBlock());
  func::ReturnOp::create(body, host.getLoc());
  return setup;
}

struct DispatchExecutorTargets : impl::DispatchExecutorTargetsBase<DispatchExecutorTargets> {
  void runOnOperation() override {
    ModuleOp host = getOperation();
    llvm::StringMap<DispatchedModule> dispatched;
    SmallVector<StringRef> order;
    for (ModuleOp target : getTargetModules(host)) {
      auto object =
          target->getAttrOfType<StringAttr>(catalyst::CatalystDialect::kObjectFileAttrName);
      if (!object) {
        if (target->hasAttr(catalyst::CatalystDialect::kTargetAttrName))
          target.emitError("target module has no catalyst.object_file; run "
                           "cross-compile-targets before dispatch-executor-targets");
        else
          target.emitError("dispatched module has neither catalyst.target (to compile it) nor "
                           "catalyst.object_file (a prebuilt object to ship)");
        return signalPassFailure();
      }
      if (!target.getSymName()) {
        target.emitError("target module needs a name (module @name) for launches to refer to");
        return signalPassFailure();
      }
      dispatched[*target.getSymName()] = {target, getDispatchAddress(target), object.str()};
      order.push_back(*target.getSymName());
    }
    if (dispatched.empty())
      return;

    FailureOr<func::FuncOp> setup = getOrCreateSetup(host);
    if (failed(setup))
      return signalPassFailure();
    injectSetup(*setup, dispatched, order);

    SessionCache sessions;
    WalkResult walk = host.walk([&](catalyst::LaunchKernelOp launch) {
      auto it = dispatched.find(launch.getCallee().getRootReference().getValue());
      if (it == dispatched.end())
        return WalkResult::advance();
      // Launches inside a target module belong to that module's own compilation.
      if (launch->getParentOfType<ModuleOp>() != host)
        return WalkResult::advance();
      if (!launch->getParentOfType<FunctionOpInterface>()) {
        launch.emitOpError("must be inside a function to be dispatched");
        return WalkResult::interrupt();
      }
      OpBuilder builder(launch);
      const DispatchedModule &target = it->second;
      auto rewritten = executor::LaunchOp::create(
          builder, launch.getLoc(), launch.getResultTypes(), sessions.get(launch, target.address),
          launch.getCallee().getLeafReference().getValue(), target.objectFile, launch.getInputs());
      launch.replaceAllUsesWith(rewritten.getResults());
      launch.erase();
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return signalPassFailure();

    for (StringRef name : order)
      dispatched[name].module.erase();
  }

  /// Puts one executor.open per address and one send_binary per module at the top of
  /// setup(), before anything the user wrote there.
  void injectSetup(func::FuncOp setup, llvm::StringMap<DispatchedModule> &dispatched,
                   ArrayRef<StringRef> order) {
    OpBuilder builder = OpBuilder::atBlockBegin(&setup.getBody().front());
    llvm::StringMap<Value> sessions;
    auto sessionType = executor::SessionType::get(&getContext());
    for (StringRef name : order) {
      DispatchedModule &target = dispatched[name];
      Value &session = sessions[target.address];
      if (!session)
        session =
            executor::OpenOp::create(builder, target.module.getLoc(), sessionType, target.address);
    }
    for (StringRef name : order) {
      DispatchedModule &target = dispatched[name];
      executor::SendBinaryOp::create(builder, target.module.getLoc(), sessions[target.address],
                                     target.objectFile, "object");
    }
  }
};

} // namespace
} // namespace courier
