"""Other runtimes' kernels of our ops as `--plugin` entries, audited on the same scale as ours
(docs/PLUGINS.md, "PyTorch's CUDA kernels"). Each module is optional: it raises PluginError with
what to install when its runtime is missing."""
