"""TPUTrainer's custom_config is checked when the pipeline is defined.

As TPUBulkInferrer's is: an unknown key or a bad value fails the pipeline's
definition (and `run --pipeline` with exit status 2 before any component),
not the trainer's step after ExampleGen ... Transform ran.
"""

import dataclasses
import json
import os
import textwrap

import pytest
from tfx.types import channel_utils
from tfx.types import standard_artifacts

from tfx_tpu_trainer import component
from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer_cli import main as cli


def _trainer(custom_config):
  examples = channel_utils.as_channel([standard_artifacts.Examples()])
  return component.TPUTrainer(module_file='my_module.py', examples=examples,
                              custom_config=custom_config)


@pytest.mark.parametrize('custom_config,message', [
    ({'input_cache': 'memory'},
     r"TPUTrainer: custom_config\['input_cache'\]='memory' is not accepted; "
     r"use one of \['auto', 'parsed', 'disk', 'serialized', 'none'\]"),
    ({'train_batch_size': -8},
     r"TPUTrainer: custom_config\['train_batch_size'\] must be a positive "
     'integer, got -8'),
    ({'batch_size': 8},
     r"TPUTrainer: Unknown custom_config key\(s\) \['batch_size'\]"),
])
def test_a_bad_custom_config_fails_the_definition(custom_config, message):
  with pytest.raises(config_lib.ConfigError, match=message):
    _trainer(custom_config)


def test_the_definition_accepts_exactly_the_trainer_config_keys():
  # The check is TrainerConfig itself: a key it gains is accepted here too.
  with pytest.raises(config_lib.ConfigError) as error:
    _trainer({'no_such_key': 1})
  accepted = sorted(f.name for f in dataclasses.fields(
      config_lib.TrainerConfig))
  assert f'Accepted keys: {accepted}.' in str(error.value)


def test_a_good_custom_config_is_kept_as_given(monkeypatch):
  # The definition reads no environment: TPU_NAME is the step's.
  monkeypatch.setenv('TPU_NAME', 'my-tpu')
  config = {'train_batch_size': 8, 'input_cache': 'parsed',
            'num_shards': 8, 'eval_batch_size': 12}
  trainer = _trainer(config)
  assert json.loads(trainer.exec_properties['custom_config']) == config


_PIPELINE = '''
from tfx import v1 as tfx
from tfx_tpu_trainer import TPUTrainer

def create_pipeline():
  example_gen = tfx.components.CsvExampleGen(input_base={data!r})
  trainer = TPUTrainer(
      module_file='my_module.py', examples=example_gen.outputs['examples'],
      train_args=tfx.proto.TrainArgs(num_steps=10),
      custom_config={{'input_cache': 'memory'}})
  return tfx.dsl.Pipeline(pipeline_name='bad-config',
                          pipeline_root={root!r},
                          components=[example_gen, trainer])
'''


def test_run_refuses_a_bad_custom_config_before_any_component(tmp_path,
                                                              capfd):
  root = tmp_path / 'root'
  (tmp_path / 'p.py').write_text(textwrap.dedent(_PIPELINE.format(
      data=str(tmp_path), root=str(root))))
  code = cli.main(['run', '--pipeline', f'{tmp_path / "p.py"}:create_pipeline',
                   '--output-root', str(tmp_path / 'out')])
  out, err = capfd.readouterr()
  assert code == 2, out + err
  assert ("create_pipeline() in p.py raised ConfigError: TPUTrainer: "
          "custom_config['input_cache']='memory' is not accepted" in err), err
  assert '[1/' not in out
  assert not os.path.exists(root) and not os.path.exists(tmp_path / 'out')
