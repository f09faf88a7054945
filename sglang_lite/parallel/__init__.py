"""Tensor parallelism (``tp`` > 1): the model sharded over ranks that run every batch together.

``shard.py`` (how weights split), ``group.py`` (the process groups), ``plan.py`` (a step's
``ForwardBatch`` on the wire), ``launcher.py`` (rank 0: starting and watching the workers; why
rank 0 plans alone), ``worker.py`` (the other ranks), ``runner.py`` (rank 0's model runner).
"""
