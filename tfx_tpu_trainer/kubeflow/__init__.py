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
  v2_metrics    the trainer's `system.Metrics` output (KFP v2 / Vertex UIs)
                and the v2 trainer step's entrypoint.
  compiler      the compile API: any pipeline with TPUTrainer(s) for KFP v1,
                KFP v2 and Vertex AI (`KubeflowOptions`, `compile_pipeline`).
  compiled_files what the compiled files say, read back from them.
  beam_args     the `--beam-arg` values, checked as Beam reads them, and
                which components get them.
  beam_runners  what each Beam runner (Dataflow, Flink, Spark, portable)
                needs, checked on Beam's parsed options.
  vertex_tpu    why a Vertex AI pipeline step cannot carry a GKE TPU slice.
  tpu_check_step `tpu-check` as a pipeline's first step (`TpuCheck`).
"""
