"""The cyclic garbage collector around the frameworks' imports (xrand.frameworks.collector): off
while they import, back as it was after; in xrand's own processes what a new import made is frozen,
in a user's process nothing is, and a pipeline loaded before a block that imports nothing stays
collectable."""
import json

from conftest import run_python

CODE = """
import gc, json, sys, weakref
from xrand.frameworks.collector import freeze_imports, imports_uncollected
if sys.argv[1] == "own":
    freeze_imports()
class Pipe:  # a loaded pipeline: objects in a cycle, given back by a collection
    def __init__(self):
        self.me = self
seen = {}
held = Pipe(); ref = weakref.ref(held)
with imports_uncollected():
    seen["off inside"] = not gc.isenabled()
    import json  # imported already: nothing new
del held; gc.collect()
seen["collected after a block that imported nothing"] = ref() is None
seen["nothing frozen by it"] = gc.get_freeze_count() == 0
held = Pipe(); ref = weakref.ref(held)
with imports_uncollected():
    import colorsys  # new
del held; gc.collect()
seen["collected after a block that imported"] = ref() is None
seen["frozen by it"] = gc.get_freeze_count() > 0
seen["on after"] = gc.isenabled()
gc.disable()
with imports_uncollected():
    pass
seen["off after where it was off"] = not gc.isenabled()
print(json.dumps(seen))
"""


def seen(process):
    out = run_python(f"import sys; sys.argv[1:] = [{process!r}]\n{CODE}")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_in_xrands_own_process_a_new_import_freezes_what_is_alive_and_nothing_else_does():
    assert seen("own") == {"off inside": True, "collected after a block that imported nothing": True,
                           "nothing frozen by it": True, "collected after a block that imported": False,
                           "frozen by it": True,
                           "on after": True, "off after where it was off": True}


def test_in_a_users_process_nothing_is_frozen():
    assert seen("users") == {"off inside": True, "collected after a block that imported nothing": True,
                             "nothing frozen by it": True, "collected after a block that imported": True,
                             "frozen by it": False,
                             "on after": True, "off after where it was off": True}


def test_a_comparisons_own_process_never_freezes_a_pipeline_it_loads(mindone):
    """The command line's process loads torch's pipeline, drops it for MindSpore's (whose first load
    imports mindone's pipeline modules: a block that freezes), then drops that: each pipeline is in
    the collector's care at its drop (not frozen) and is gone after it."""
    out = run_python("""
import gc, json, weakref
from xrand.frameworks.collector import freeze_imports
freeze_imports()
from xrand.cli import default_model, import_frameworks
from xrand.compare import make_plan
from xrand.compare.stages import Loading
from xrand.pipelines.settings import Settings
import_frameworks(["torch", "mindspore"])
pipes = Loading(make_plan(Settings(model=default_model(), steps=1, batch_size=1)))
seen = {}
for name in ("torch", "mindspore"):
    pipe = pipes.get(name).pipe
    ref = weakref.ref(pipe)
    seen[name + " frozen"] = gc.get_freeze_count() > 0 and not any(o is pipe for o in gc.get_objects())
    del pipe
    pipes.release(name)
    seen[name + " gone"] = ref() is None
print(json.dumps(seen))
""")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1]) == {"torch frozen": False, "torch gone": True,
                                                       "mindspore frozen": False, "mindspore gone": True}
