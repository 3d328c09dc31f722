// Helpers the dispatch passes share.
#include "passes/TargetModules.h"

using namespace mlir;

namespace courier {

SmallVector<ModuleOp> getTargetModules(ModuleOp host) {
  SmallVector<ModuleOp> targets;
  for (auto nested : host.getBody()->getOps<ModuleOp>())
    if (nested->hasAttr(catalyst::CatalystDialect::kTargetAttrName) ||
        nested->hasAttr(catalyst::CatalystDialect::kDispatchAttrName))
      targets.push_back(nested);
  return targets;
}

std::string getDispatchAddress(ModuleOp target) {
  auto dispatch =
      target->getAttrOfType<DictionaryAttr>(catalyst::CatalystDialect::kDispatchAttrName);
  if (dispatch)
    if (auto address = dispatch.getAs<StringAttr>("address"); address && !address.empty())
      return address.str();
  return kLocalAddress.str();
}

SmallVector<std::string> getProgramExecutors(ModuleOp host) {
  SmallVector<std::string> addresses;
  for (ModuleOp target : getTargetModules(host))
    if (target->hasAttr(catalyst::CatalystDialect::kDispatchAttrName))
      if (std::string address = getDispatchAddress(target); !llvm::is_contained(addresses, address))
        addresses.push_back(std::move(address));
  return addresses;
}

Value SessionCache::get(Operation *user, StringRef address) {
  auto function = user->getParentOfType<FunctionOpInterface>();
  auto key = std::make_pair(function.getOperation(), StringAttr::get(user->getContext(), address));
  if (Value session = sessions.lookup(key))
    return session;
  OpBuilder builder(user->getContext());
  builder.setInsertionPointToStart(&function.getFunctionBody().front());
  Value session = executor::OpenOp::create(builder, function.getLoc(),
                                           executor::SessionType::get(user->getContext()), address);
  sessions[key] = session;
  return session;
}

} // namespace courier
