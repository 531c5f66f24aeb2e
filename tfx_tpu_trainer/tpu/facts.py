"""What a TPU computation rejects, shared by the adapters and preflight."""

import tensorflow as tf

__all__ = ['TPU_RESOURCE', 'V1_SUMMARY_OPS', 'TPU_REJECTED_OPS', 'CROSS_REPLICA_SUM_OP',
           'TPU_UNSUPPORTED_DTYPES', 'INFEED_REJECTED_DTYPES']

# GKE's extended resource of TPU chips, requested per pod (one host each).
TPU_RESOURCE = 'google.com/tpu'

# v1 summary ops (`tf.compat.v1.summary.*`): rejected inside a TPU computation.
V1_SUMMARY_OPS = frozenset([
    'AudioSummary', 'AudioSummaryV2', 'HistogramSummary', 'ImageSummary',
    'MergeSummary', 'ScalarSummary', 'TensorSummary', 'TensorSummaryV2'
])
# Every op a TPU computation rejects: the summaries and `tf.compat.v1.Print`.
TPU_REJECTED_OPS = V1_SUMMARY_OPS | {'Print'}
# The op `CrossShardOptimizer` (cross_replica_sum) adds to average gradients.
CROSS_REPLICA_SUM_OP = 'CrossReplicaSum'
# Dtypes XLA on CPU compiles and a TPU does not.
TPU_UNSUPPORTED_DTYPES = {tf.float64: 'float64', tf.complex128: 'complex128'}
# What the TPU infeed cannot carry: strings, and the dtypes above.
INFEED_REJECTED_DTYPES = {tf.string: 'a string', **TPU_UNSUPPORTED_DTYPES}
