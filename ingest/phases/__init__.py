"""A training job's collectives: NCCL/RCCL logs (followed or finished), the NCCL Inspector,
PyTorch's Kineto traces and Flight Recorder dumps, coalesced into phases and communicator graphs
(README.md)."""
