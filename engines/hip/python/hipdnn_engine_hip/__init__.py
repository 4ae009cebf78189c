"""hipdnn's GPU engine (flash-attention SDPA, engines 201 and 202), as its own distribution.

The plugin library sits in this package's directory; hipdnn finds it through the
``hipdnn.engine_plugins`` entry point (``hip = "hipdnn_engine_hip"``) without importing this module.
There is nothing to import: ``pip install ./engines/hip`` next to hipdnn is all a GPU user does.
"""
