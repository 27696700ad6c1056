"""`python -m llama_cpp.server` with llama.cpp's extra CPU buffers (AMX, repacking) turned off.

llama-cpp-python's server has no option for `use_extra_bufts`, and on CPUs whose AMX path
crashes (llama.cpp #20824) it dies on its first request. The tests start it through this file
on such a machine: the same server, loaded as chatapp's engine loads the model there.
"""

import runpy

import llama_cpp

_defaults = llama_cpp.llama_cpp.llama_model_default_params


def _model_params():
    params = _defaults()
    params.use_extra_bufts = False
    return params


llama_cpp.llama_cpp.llama_model_default_params = _model_params
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
