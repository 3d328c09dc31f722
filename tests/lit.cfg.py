# lit configuration for Courier's FileCheck tests.
import os

import lit.formats

config.name = "Courier"
config.test_format = lit.formats.ShTest(True)
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.courier_obj_root, "tests")
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py.in", "unit", "jit", "runtime", "transport", "serve", "kernels", "Inputs", "catalyst", "programs"]

# The build's tools come first so a stray installed tool is never picked up.
path = os.pathsep.join([os.path.join(config.courier_obj_root, "bin"), config.llvm_tools_dir,
                        config.environment.get("PATH", os.environ.get("PATH", ""))])
config.environment["PATH"] = path
config.substitutions.append(("%host_triple", config.host_triple))
config.substitutions.append(("%courier_libs", os.path.join(config.courier_obj_root, "lib")))
