"""Runs the TPUTrainer executor as a pipeline step would (for kill tests).

Usage: python -m tests.executor_subprocess SPEC.json, where the spec holds
`input_dict` and `output_dict` (TFX artifact JSON), `exec_properties`, and
the `pipeline_name`, `pipeline_run_id` and `node_id` of the execution context.
"""

import json
import sys

from absl import logging
from tfx.dsl.components.base import base_executor
from tfx.proto.orchestration import pipeline_pb2
from tfx.types import artifact_utils

from tfx_tpu_trainer import executor


def main(spec_path: str) -> None:
  with open(spec_path) as f:
    spec = json.load(f)
  logging.set_verbosity(logging.INFO)
  context = base_executor.BaseExecutor.Context(
      pipeline_info=pipeline_pb2.PipelineInfo(id=spec['pipeline_name']),
      pipeline_node=pipeline_pb2.PipelineNode(
          node_info=pipeline_pb2.NodeInfo(id=spec['node_id'])),
      pipeline_run_id=spec['pipeline_run_id'])
  executor.Executor(context).Do(
      artifact_utils.parse_artifact_dict(spec['input_dict']),
      artifact_utils.parse_artifact_dict(spec['output_dict']),
      spec['exec_properties'])


if __name__ == '__main__':
  main(sys.argv[1])
