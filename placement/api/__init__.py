"""Generated Python code of the placement service's gRPC API (see tools/regen_protos.sh)."""
