"""`compile --pipeline` warns of a secret in a TPUTrainer's custom_config.

Issue 38 item 11: the compiled file carries custom_config in plain text.
"""

import os

from tfx_tpu_trainer_cli import main as cli

EXAMPLE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), 'examples', 'penguin_tpu')


def test_compile_warns_of_a_token_in_custom_config_params(tmp_path, capsys):
  path = tmp_path / 'my_pipeline.py'
  path.write_text(
      f'import json\nimport sys\nsys.path.insert(0, {EXAMPLE_DIR!r})\n'
      'import penguin_pipeline\n'
      'from tfx_tpu_trainer import component\n\n'
      'def create_pipeline():\n'
      '  pipeline = penguin_pipeline.create_pipeline(\n'
      f'      data_root={str(tmp_path / "data")!r},\n'
      f'      pipeline_root={str(tmp_path / "root")!r})\n'
      '  for trainer in component.tpu_trainers(pipeline):\n'
      "    config = json.loads(trainer.exec_properties['custom_config'])\n"
      "    config['params'] = {'api_token': 'tok-123', 'hidden_units': 8}\n"
      "    trainer.exec_properties['custom_config'] = json.dumps(config)\n"
      '  return pipeline\n')
  assert cli.main(['compile', '--pipeline', f'{path}:create_pipeline',
                   '--output-dir', str(tmp_path / 'out'), '--image',
                   'gcr.io/p/i:1']) == 0
  out = capsys.readouterr().out
  assert ("Warning: TPUTrainer 'TPUTrainer' has custom_config "
          'params.api_token: the compiled file carries the value(s) in plain '
          'text') in out, out
  assert 'tok-123' not in out
