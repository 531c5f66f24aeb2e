"""Secrets masked in every log: by option name and by value pattern, in the
log records of TFX, Beam and TensorFlow too (issue 50, item 9)."""

import logging
import os
import subprocess
import sys

import pytest

from tfx_tpu_trainer.publishing import secrets

from tests.conftest import REPO_ROOT
from tests.fixtures import bulk_inference
from tests.fixtures import tiny_saved_models


@pytest.mark.parametrize('text,expected', [
    # By option name: a Beam arg in TFX's deployment-config dump.
    ('beam_pipeline_args: "--s3_secret_access_key=S3VALUE"',
     'beam_pipeline_args: "--s3_secret_access_key=***"'),
    # By value pattern: the key inside a connection string.
    ('--azure_connection_string=DefaultEndpointsProtocol=https;AccountName=a;'
     'AccountKey=AZVALUE==;EndpointSuffix=core.windows.net',
     '--azure_connection_string=DefaultEndpointsProtocol=https;AccountName=a;'
     'AccountKey=***;EndpointSuffix=core.windows.net'),
    ('jdbc password=PWVALUE user=me', 'jdbc password=*** user=me'),
    ('Authorization: Bearer eyJ0eXAi.PAYLOAD-1_x', 'Authorization: Bearer ***'),
    ('pulling from https://me:PWVALUE@example.com/repo',
     'pulling from https://me:***@example.com/repo'),
    # Beam's line for the arguments it does not know.
    ("Discarding unparseable args: ['--some_token=TOKVALUE', '--foo=bar']",
     "Discarding unparseable args: ['--some_token=***', '--foo=bar']"),
    # TFX's exec_properties: custom_config's JSON in a dict's repr, and in a
    # proto's text (escaped quotes).
    ("""{'custom_config': '{"params": {"api_token": "TOKVALUE", "n": 8}}'}""",
     """{'custom_config': '{"params": {"api_token": "***", "n": 8}}'}"""),
    (r'string_value: "{\"client_secret\": \"CSVALUE\", \"n\": 8}"',
     r'string_value: "{\"client_secret\": \"***\", \"n\": 8}"'),
    # Not secrets: keys of labels, predictions and steps stay.
    ("label_key: tips, prediction_key='probabilities', train_steps=100",
     "label_key: tips, prediction_key='probabilities', train_steps=100"),
])
def test_mask_text(text, expected):
  assert secrets.mask_text(text) == expected


def test_masked_arg_masks_a_secret_inside_a_value():
  assert secrets.masked_arg('--azure_connection_string=AccountName=a;'
                            'AccountKey=K==') == (
                                '--azure_connection_string=AccountName=a;'
                                'AccountKey=***')
  assert secrets.masked_arg('--runner=DirectRunner') == '--runner=DirectRunner'


_LOGGING_PROCESS = '''
import logging, sys
from absl import logging as absl_logging
from tfx_tpu_trainer.publishing import secrets
secrets.mask_logs()
logging.basicConfig(stream=sys.stdout, level=logging.INFO)
absl_logging.info('exec_properties: %s', {'custom_config': '{"token": "T1"}'})
logging.getLogger('apache_beam.options.pipeline_options').warning(
    'Discarding unparseable args: %s', ['--some_token=T2'])
logging.getLogger('tensorflow').info('Authorization: Bearer T3')
try:
  raise ValueError('password=T4')
except ValueError:
  logging.getLogger('tfx').exception('failed')
raise RuntimeError('--db_password=T5')
'''


def test_every_logger_of_a_process_is_masked(tmp_path):
  # absl's (TFX's), Beam's, TensorFlow's loggers, a traceback, and an
  # uncaught error: a process that called mask_logs shows none of them.
  process = subprocess.run(
      [sys.executable, '-c', _LOGGING_PROCESS.replace(
          'secrets.mask_logs()', 'secrets.mask_logs(uncaught=True)')],
      cwd=REPO_ROOT, capture_output=True, text=True, check=False)
  output = process.stdout + process.stderr
  assert process.returncode == 1, output
  for value in ('T1', 'T2', 'T3', 'T4', 'T5'):
    assert f'{value}"' not in output and f'={value}' not in output and (
        f' {value}\n' not in output), (value, output)
  assert output.count('***') >= 5, output
  assert 'Discarding unparseable args' in output


def test_the_bulk_inferrer_masks_the_beam_args_beam_discards(tmp_path,
                                                             caplog):
  # pylint: disable=g-import-not-at-top
  from tfx.dsl.components.base import base_beam_executor
  from tfx.types import standard_artifacts
  from tfx_tpu_trainer.bulk_inferrer import executor
  # pylint: enable=g-import-not-at-top
  uri = str(tmp_path / 'model')
  tiny_saved_models.write_doubling_model(uri)
  examples = tiny_saved_models.write_examples(str(tmp_path / 'examples'),
                                              {'eval': [1.0, 2.0]})
  output = standard_artifacts.InferenceResult()
  output.uri = str(tmp_path / 'out')
  context = base_beam_executor.BaseBeamExecutor.Context(
      beam_pipeline_args=['--direct_num_workers=1', '--some_token=TOKVALUE'])
  with caplog.at_level(logging.WARNING):
    executor.Executor(context).Do(
        {'examples': [examples], 'model': [tiny_saved_models.model_artifact(
            uri)]}, {'inference_result': [output]},
        bulk_inference.exec_properties(custom_config={'batch_size': 2}))
  discarded = [r.getMessage() for r in caplog.records
               if 'Discarding unparseable args' in r.getMessage()]
  assert discarded and all('--some_token=***' in m for m in discarded), (
      discarded)
  assert 'TOKVALUE' not in caplog.text
  assert os.listdir(output.uri)
