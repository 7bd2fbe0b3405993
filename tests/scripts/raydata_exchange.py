"""The object collectives ``rtdebug.rank.localmode.data`` needs, made here from torch.distributed (gloo).

Imported by the ``raydata_*`` scripts (their folder is on sys.path); not a job of its own."""

import torch.distributed as dist


class TorchExchange:
    def __init__(self) -> None:
        self.group = dist.new_group(backend="gloo")

    def broadcast(self, obj, src=0):
        box = [obj]
        dist.broadcast_object_list(box, src=src, group=self.group)
        return box[0]

    def barrier(self) -> None:
        dist.barrier(group=self.group)
