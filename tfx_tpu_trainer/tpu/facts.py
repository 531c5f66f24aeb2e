"""What a TPU computation rejects, shared by the adapters and preflight."""

import tensorflow as tf

__all__ = ['TPU_RESOURCE', 'V1_SUMMARY_OPS', 'V2_SUMMARY_OPS',
           'TPU_REJECTED_OPS', 'CROSS_REPLICA_SUM_OP',
           'TPU_UNSUPPORTED_DTYPES', 'INFEED_REJECTED_DTYPES',
           'TPU_INFERENCE_OPS', 'HOST_CALL_SUMMARY_FIX']

# GKE's extended resource of TPU chips, requested per pod (one host each).
TPU_RESOURCE = 'google.com/tpu'

# v1 summary ops (`tf.compat.v1.summary.*`): rejected inside a TPU computation.
V1_SUMMARY_OPS = frozenset([
    'AudioSummary', 'AudioSummaryV2', 'HistogramSummary', 'ImageSummary',
    'MergeSummary', 'ScalarSummary', 'TensorSummary', 'TensorSummaryV2'
])
# tf2 summary ops (`tf.summary.*` with a writer): XLA has no kernel for them.
V2_SUMMARY_OPS = frozenset([
    'CreateSummaryFileWriter', 'CreateSummaryDbWriter', 'SummaryWriter',
    'WriteSummary', 'WriteScalarSummary', 'WriteHistogramSummary',
    'WriteImageSummary', 'WriteAudioSummary', 'WriteGraphSummary',
    'WriteRawProtoSummary', 'FlushSummaryWriter', 'CloseSummaryWriter',
    'ImportEvent'
])
# How a model_fn writes summaries on TPU: from the host, in a host_call.
HOST_CALL_SUMMARY_FIX = (
    'Write summaries from the host: return the TPUEstimatorSpec with '
    "host_call=tfx_tpu_trainer.scalar_summaries_host_call({'name': "
    "scalar, ...}, params['model_dir']) (tf.summary on the CPU after the "
    'steps, as tensorflow/tpu\'s ResNet does; docs/guide/your_model.md, '
    '"Summaries on a TPU").')
# Every op a TPU computation rejects: the summaries and `tf.compat.v1.Print`.
TPU_REJECTED_OPS = V1_SUMMARY_OPS | {'Print'}
# The op `CrossShardOptimizer` (cross_replica_sum) adds to average gradients.
CROSS_REPLICA_SUM_OP = 'CrossReplicaSum'
# Ops of a graph that runs its model on the TPU (the `{serve, tpu}` graph of
# an export): TPUEstimator's API v1 and `model_fn_inference_on_tpu` add them.
TPU_INFERENCE_OPS = frozenset(['TPUPartitionedCall', 'TPUReplicateMetadata'])
# Dtypes XLA on CPU compiles and a TPU does not.
TPU_UNSUPPORTED_DTYPES = {tf.float64: 'float64', tf.complex128: 'complex128'}
# What the TPU infeed cannot carry: strings, and the dtypes above.
INFEED_REJECTED_DTYPES = {tf.string: 'a string', **TPU_UNSUPPORTED_DTYPES}
