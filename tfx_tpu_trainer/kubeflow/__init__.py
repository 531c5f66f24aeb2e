"""Kubeflow Pipelines support: TPU scheduling and the trainer step's outputs.

  options       the compile choices (runners, TPU styles, default image);
                imports nothing heavy, so the command line can use it.
  scheduling    TPU resources, node selectors, tolerations and requests of
                the trainer pod (`TrainerPod`: KFP v1 operator functions,
                KFP v2 resources and platform spec, Vertex AI resources).
  step_outputs  the trainer step's KFP UI outputs and its entrypoint wrapper
                (including retries whose execution had already succeeded).
  kfp_v2_protos today's KFP v2 PipelineSpec/PlatformSpec and kfp-kubernetes
                protobufs (from `proto/`), beside the pinned kfp's older ones.
  runtimes      TF 2.15's TPU runtimes (StreamExecutor, PJRT) per TPU
                generation, with sources: the support matrix as data.
  beam_args     the `--beam-arg` values, checked as Beam reads them, and
                which components get them.
  vertex_tpu    why a Vertex AI pipeline step cannot carry a GKE TPU slice.
  tpu_check_step `tpu-check` as a pipeline's first step (`TpuCheck`).
"""
