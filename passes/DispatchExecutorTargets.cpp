// dispatch-executor-targets: open sessions and ship objects in setup() and at the top of each
// launching function, rewrite kernel launches into executor.launch (or launch_async and
// await), dispatched custom calls into executor.call, and drop the shipped modules.
#include "passes/Passes.h"
#include "passes/TargetModules.h"

#include <set>

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

/// Ships objects at the top of functions, once per function, session and object, after the
/// function's sessions are open and in the order the launches need them.
class ShipmentCache {
public:
  void ensure(Operation *user, Value session, StringRef object) {
    auto function = user->getParentOfType<FunctionOpInterface>();
    if (!shipped.insert({session.getAsOpaquePointer(), object.str()}).second)
      return;
    Operation *&last = lastShipment[function.getOperation()];
    Operation *open = session.getDefiningOp();
    Operation *after = last && open->isBeforeInBlock(last) ? last : open;
    OpBuilder builder(after->getContext());
    builder.setInsertionPointAfter(after);
    last = dialect::executor::SendBinaryOp::create(builder, function.getLoc(), session, object);
  }

private:
  /// (session value, object); a session value belongs to one function.
  std::set<std::pair<const void *, std::string>> shipped;
  llvm::DenseMap<Operation *, Operation *> lastShipment;
};

struct DispatchExecutorTargets : impl::DispatchExecutorTargetsBase<DispatchExecutorTargets> {
  void runOnOperation() override {
    ModuleOp host = getOperation();
    // The caches key on operations of this run only.
    sessions = SessionCache();
    shipments = ShipmentCache();
    llvm::StringMap<DispatchedModule> dispatched;
    SmallVector<StringRef> order;
    for (ModuleOp target : getTargetModules(host)) {
      auto object = target->getAttrOfType<StringAttr>(
          dialect::catalyst::CatalystDialect::kObjectFileAttrName);
      if (!object) {
        if (target->hasAttr(dialect::catalyst::CatalystDialect::kTargetAttrName))
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
    // Library calls inside target modules belong to those modules' own compilation.
    SmallVector<dialect::catalyst::CustomCallOp> customCalls;
    for (auto function : host.getBody()->getOps<FunctionOpInterface>())
      function.walk([&](dialect::catalyst::CustomCallOp call) {
        if (call.getDispatch())
          customCalls.push_back(call);
      });
    if (dispatched.empty() && customCalls.empty())
      return;

    if (!dispatched.empty()) {
      FailureOr<func::FuncOp> setup = getOrCreateSetup(host);
      if (failed(setup))
        return signalPassFailure();
      injectSetup(*setup, dispatched, order);
    }

    SmallVector<dialect::executor::LaunchAsyncOp> started;
    if (failed(rewriteLaunches(host, dispatched, started)) ||
        failed(rewriteCustomCalls(host, customCalls)) || failed(awaitAsyncLaunches(started)))
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
    auto sessionType = dialect::executor::SessionType::get(&getContext());
    for (StringRef name : order) {
      DispatchedModule &target = dispatched[name];
      Value &session = sessions[target.address];
      if (!session)
        session = dialect::executor::OpenOp::create(builder, target.module.getLoc(), sessionType,
                                                    target.address);
    }
    for (StringRef name : order) {
      DispatchedModule &target = dispatched[name];
      dialect::executor::SendBinaryOp::create(builder, target.module.getLoc(),
                                              sessions[target.address], target.objectFile);
    }
  }

  /// Each host launch into a dispatched module becomes executor.launch (or, marked
  /// catalyst.nonblocking, executor.launch_async) on the function's session, after the
  /// function has shipped the object. With a bring-up function in the program only
  /// bring-up functions ship.
  LogicalResult rewriteLaunches(ModuleOp host, llvm::StringMap<DispatchedModule> &dispatched,
                                SmallVectorImpl<dialect::executor::LaunchAsyncOp> &started) {
    bool bringupMode = llvm::any_of(host.getBody()->getOps<FunctionOpInterface>(), [](auto fn) {
      return fn->hasAttr(dialect::catalyst::CatalystDialect::kBacklineBringupAttrName);
    });
    SmallVector<dialect::catalyst::LaunchKernelOp> launches;
    host.walk([&](dialect::catalyst::LaunchKernelOp launch) {
      // Launches inside a target module belong to that module's own compilation.
      if (launch->getParentOfType<ModuleOp>() == host &&
          dispatched.count(launch.getCallee().getRootReference().getValue()))
        launches.push_back(launch);
    });
    for (dialect::catalyst::LaunchKernelOp launch : launches) {
      auto function = launch->getParentOfType<FunctionOpInterface>();
      if (!function)
        return launch.emitOpError("must be inside a function to be dispatched");
      const DispatchedModule &target =
          dispatched.find(launch.getCallee().getRootReference().getValue())->second;
      StringRef callee = launch.getCallee().getLeafReference().getValue();
      bool nonblocking = launch->hasAttr(dialect::catalyst::CatalystDialect::kNonblockingAttrName);
      if (nonblocking && (!launch.getInputs().empty() || launch.getNumResults() != 0))
        return launch.emitOpError("nonblocking dispatch requires a '()->()' callee: ")
               << launch.getCallee() << " takes " << launch.getInputs().size()
               << " arguments and returns " << launch.getNumResults()
               << " results; an asynchronous launch has no results to wait for";
      Value session = sessions.get(launch, target.address);
      if (!bringupMode ||
          function->hasAttr(dialect::catalyst::CatalystDialect::kBacklineBringupAttrName))
        shipments.ensure(launch, session, target.objectFile);
      OpBuilder builder(launch);
      if (nonblocking) {
        started.push_back(dialect::executor::LaunchAsyncOp::create(
            builder, launch.getLoc(), dialect::executor::TokenType::get(&getContext()), session,
            callee, target.objectFile));
        launch.erase();
        continue;
      }
      auto rewritten = dialect::executor::LaunchOp::create(builder, launch.getLoc(),
                                                           launch.getResultTypes(), session, callee,
                                                           target.objectFile, launch.getInputs());
      launch.replaceAllUsesWith(rewritten.getResults());
      launch.erase();
    }
    return success();
  }

  /// A custom_call with a `dispatch` in its backend_config becomes executor.call on that
  /// executor; an empty dispatch binds to the program's single executor.
  LogicalResult rewriteCustomCalls(ModuleOp host, ArrayRef<dialect::catalyst::CustomCallOp> calls) {
    if (calls.empty())
      return success();
    SmallVector<std::string> programExecutors = getProgramExecutors(host);
    for (dialect::catalyst::CustomCallOp call : calls) {
      std::string address = call.getDispatch().str();
      if (address.empty()) {
        if (programExecutors.empty())
          return call.emitOpError("custom_call dispatch has no executor address: its "
                                  "backend_config dispatch is \"\" and no nested module carries "
                                  "catalyst.dispatch; name the executor (\"host:port\" or "
                                  "\"local\")");
        if (programExecutors.size() > 1) {
          InFlightDiagnostic diag = call.emitOpError(
              "ambiguous executor: its backend_config dispatch is \"\" but the program uses ");
          llvm::interleaveComma(programExecutors, diag,
                                [&](StringRef a) { diag << "'" << a << "'"; });
          return diag << "; name one";
        }
        address = programExecutors.front();
      }
      OpBuilder builder(call);
      std::optional<int32_t> inputs = call.getNumberOriginalArg();
      auto rewritten = dialect::executor::CallOp::create(
          builder, call.getLoc(), call.getResultTypes(), sessions.get(call, address),
          call.getCallTargetName(), call.getInputs(),
          inputs ? builder.getI32IntegerAttr(*inputs) : IntegerAttr());
      call.replaceAllUsesWith(rewritten.getResults());
      call.erase();
    }
    return success();
  }

  /// A function that started asynchronous launches waits for them before it returns, on
  /// every return, so nothing it launched outlives the call. Only launches in the entry block
  /// have a token that reaches every return. Launches this pass did not create (written as
  /// executor ops) are the writer's to await.
  LogicalResult awaitAsyncLaunches(ArrayRef<dialect::executor::LaunchAsyncOp> started) {
    llvm::MapVector<Operation *, SmallVector<dialect::executor::LaunchAsyncOp>> byFunction;
    for (dialect::executor::LaunchAsyncOp launch : started)
      byFunction[launch->getParentOfType<FunctionOpInterface>()].push_back(launch);
    for (auto &[op, launches] : byFunction) {
      auto function = cast<FunctionOpInterface>(op);
      Block &entry = function.getFunctionBody().front();
      for (dialect::executor::LaunchAsyncOp launch : launches)
        if (launch->getBlock() != &entry)
          return function.emitOpError("async launch must be in the function's entry block: the "
                                      "launch of '")
                 << launch.getCallee()
                 << "' is nested in a region or another block, where the await before the "
                    "function returns cannot reach its token";
      for (Block &block : function.getFunctionBody()) {
        if (block.empty() || !block.back().hasTrait<OpTrait::ReturnLike>())
          continue;
        OpBuilder builder(&block.back());
        for (dialect::executor::LaunchAsyncOp launch : launches)
          dialect::executor::AwaitOp::create(builder, launch.getLoc(), launch.getToken());
      }
    }
    return success();
  }

  SessionCache sessions;
  ShipmentCache shipments;
};

} // namespace
} // namespace courier
