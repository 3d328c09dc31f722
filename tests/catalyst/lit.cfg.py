# lit configuration that runs Catalyst's own executor tests (mlir/test/Executor/*.mlir of a
# PennyLaneAI/catalyst checkout), unmodified, with courier-opt in place of quantum-opt.
import os

import lit.formats

config.name = "Catalyst executor tests on Courier"
config.test_format = lit.formats.ShTest(True)
config.suffixes = [".mlir"]
config.test_source_root = os.path.join(config.catalyst_src_root, "mlir", "test", "Executor")
config.test_exec_root = os.path.join(config.courier_obj_root, "tests", "catalyst")

path = os.pathsep.join([os.path.join(config.courier_obj_root, "bin"), config.llvm_tools_dir,
                        config.environment.get("PATH", os.environ.get("PATH", ""))])
config.environment["PATH"] = path
config.substitutions.append(("quantum-opt", "courier-opt"))
