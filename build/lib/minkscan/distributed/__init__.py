"""The Ray Data scoring pipeline; `minkscan.distributed.runner.run_scoring(config)` is the
entry point for other layers. Nothing is imported here, so Ray workers that only read or
commit (`pieces`) or count ids (`ids`) never import the model code."""
