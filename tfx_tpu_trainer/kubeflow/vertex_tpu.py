"""What a Vertex AI PipelineJob can say about the trainer's TPU: nothing."""

from typing import Optional

# The Vertex AI machine a single-host GKE TPU VM slice corresponds to, for
# a CustomJob worker pool (machineType, acceleratorType, tpuTopology). v4
# and v5e: ct4p-hightpu-4t with 2x2x1 and ct5lp-hightpu-4t with 2x2 are named
# in Google's GKE Multislice page; ct5lp-hightpu-1t/-8t are in Google's
# machine type list. v5p's ct5p-hightpu-4t is GKE's name; Vertex AI's
# support of it is not verified.
VERTEX_MACHINES = {
    ('tpu-v4-podslice', '2x2x1'): ('ct4p-hightpu-4t', 'TPU_V4_POD'),
    ('tpu-v5-lite-podslice', '1x1'): ('ct5lp-hightpu-1t', 'TPU_V5_LITEPOD'),
    ('tpu-v5-lite-podslice', '2x2'): ('ct5lp-hightpu-4t', 'TPU_V5_LITEPOD'),
    ('tpu-v5-lite-podslice', '2x4'): ('ct5lp-hightpu-8t', 'TPU_V5_LITEPOD'),
    ('tpu-v5-lite-device', '1x1'): ('ct5l-hightpu-1t', 'TPU_V5_LITEPOD'),
    ('tpu-v5-lite-device', '2x2'): ('ct5l-hightpu-4t', 'TPU_V5_LITEPOD'),
    ('tpu-v5-lite-device', '2x4'): ('ct5l-hightpu-8t', 'TPU_V5_LITEPOD'),
    ('tpu-v5p-slice', '2x2x1'): ('ct5p-hightpu-4t', None),
}
# What a Vertex AI Pipelines step accepts as its TPU (the page above).
PIPELINE_STEP_TPUS = ('TPU_V2', 'TPU_V3')
NO_VERTEX_JOB_FLAG = '--no-vertex-job'


def refusal(accelerator: str, topology: str,
            vertex_accelerator_type: Optional[str] = None) -> str:
  """Why a Vertex AI job cannot carry this trainer TPU, and what to do."""
  machine, vertex_type = VERTEX_MACHINES.get((accelerator, topology),
                                             (None, None))
  if vertex_accelerator_type in PIPELINE_STEP_TPUS:
    why = (f'--vertex-accelerator-type {vertex_accelerator_type} would '
           f'disagree with the KFP v2 spec, which requests {accelerator} '
           f'{topology} (TPU v2/v3 have no GKE TPU VM accelerator here)')
  elif machine:
    why = (f'Vertex AI runs {accelerator} {topology} as machine type '
           f'{machine}' + (f' ({vertex_type})' if vertex_type else '') +
           f' with tpuTopology {topology}, which a pipeline step cannot '
           'carry (its resources hold an accelerator type and count only; '
           f'steps take {"/".join(PIPELINE_STEP_TPUS)})')
  else:
    why = (f'Vertex AI has no pipeline-step form of {accelerator} '
           f'{topology} (steps take {"/".join(PIPELINE_STEP_TPUS)})')
  return (f'the Vertex AI job cannot schedule the trainer on this TPU: {why}. '
          f'Pass {NO_VERTEX_JOB_FLAG} to write the KFP v2 spec alone (for a '
          'KFP v2 backend on GKE), or --no-use-tpu for a CPU Vertex job; see '
          'docs/guide/kubeflow.md, "Vertex AI and TPUs".')
