"""The small mixed V100 + T4 cluster, model and two-stage plan the heterogeneous end-to-end tests share."""

MIXED = {
    "name": "mixed",
    "pools": [
        {"name": "v100", "system": "aws-p3.8xlarge", "nodes": 1},
        {"name": "t4", "system": "aws-g4dn.12xlarge", "nodes": 1},
    ],
}
MODEL = {
    "layers": 4,
    "hidden": 512,
    "heads": 8,
    "ffn_hidden": 2048,
    "vocab": 8000,
    "max_position": 512,
}
PLAN = {
    "global_batch": 8,
    "seq_length": 512,
    "microbatches": 2,
    "dtype": "fp16",
    "attention": "unfused",
    "stages": [
        {"pool": "v100", "gpus": 4, "layers": 3},
        {"pool": "t4", "gpus": 4, "layers": 1, "recompute": "full"},
    ],
}
