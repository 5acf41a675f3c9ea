"""The course library as the re-run zygote imported it, put back before the extract and the encoder run.

The runner binds the lesson's ``extract`` before any learner code runs, but that function looks
up its helpers (``run_fixed``, ``describe``, ``forward_record``, the encoder's pieces) in its
module's namespace when it is called, and the answer cell runs first: it may replace a helper
(``sys.modules[...].describe = fake``), a function's code (``describe.__code__ = ...``), a class's
method, or a module in ``sys.modules``, and so have the extract hand back a record it made up.

``Library.take()`` (in the zygote, once every extract is imported) keeps, for every module of
``tinygpt_course`` then loaded, the module object, a copy of its namespace, and for each function
and class defined there its code, defaults and attributes; ``Library.put_back()`` (in the runner,
after the answer cell and again after the extract, whose calls run learner code too) makes them
all so again. What the learner's code changes in torch itself is not undone here: the extract
calls the learner's forward, where anything may happen; that no point can be had without the
right computation is the judges' part (each compares with the solution's record).
"""
import sys
import types

PACKAGE = "tinygpt_course"


def _own(module):
    """(name, object) of the functions and classes `module` defines itself."""
    for name, value in list(vars(module).items()):
        if isinstance(value, (types.FunctionType, type)) and getattr(value, "__module__", None) == module.__name__:
            yield name, value


def _function_state(f):
    return (f.__code__, f.__defaults__, f.__kwdefaults__, dict(f.__dict__))


class Library:
    def __init__(self):
        self.modules = {}       # name -> (module, namespace copy)
        self.functions = []     # (function, its state)
        self.classes = []       # (class, its namespace copy)

    @classmethod
    def take(cls):
        lib = cls()
        for name, module in list(sys.modules.items()):
            if not (name == PACKAGE or name.startswith(PACKAGE + ".")) or not isinstance(module, types.ModuleType):
                continue
            lib.modules[name] = (module, dict(vars(module)))
            for _, value in _own(module):
                if isinstance(value, type):
                    lib.classes.append((value, dict(vars(value))))
                    lib.functions += [(f, _function_state(f)) for f in vars(value).values()
                                      if isinstance(f, types.FunctionType)]
                else:
                    lib.functions.append((value, _function_state(value)))
        return lib

    def put_back(self):
        for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
            if name not in self.modules:
                del sys.modules[name]             # a module the learner's code added or imported
        for name, (module, namespace) in self.modules.items():
            sys.modules[name] = module
            current = vars(module)
            current.clear()
            current.update(namespace)
        for f, (code, defaults, kwdefaults, attrs) in self.functions:
            f.__code__, f.__defaults__, f.__kwdefaults__ = code, defaults, kwdefaults
            f.__dict__.clear()
            f.__dict__.update(attrs)
        for c, namespace in self.classes:
            for key in [k for k in vars(c) if k not in namespace]:
                type.__delattr__(c, key)
            for key, value in namespace.items():
                if key not in ("__dict__", "__weakref__") and vars(c).get(key, _MISSING) is not value:
                    type.__setattr__(c, key, value)


_MISSING = object()
