"""Run one test method of a unittest file: pyrun.py FILE TEST_NAME.

ctest registers each test_* method separately (tests/CMakeLists.txt), so its
count is the real number of cases. Exit 0 on pass, 1 on failure or error."""
import importlib.util
import os
import sys
import unittest

path, name = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
suite = unittest.TestSuite()
for obj in vars(mod).values():
    if isinstance(obj, type) and issubclass(obj, unittest.TestCase) and hasattr(obj, name):
        suite.addTest(obj(name))
if suite.countTestCases() != 1:
    print(f"pyrun: expected exactly one test named {name} in {path}, found {suite.countTestCases()}")
    sys.exit(2)
result = unittest.TextTestRunner(verbosity=2).run(suite)
sys.exit(0 if result.wasSuccessful() else 1)
