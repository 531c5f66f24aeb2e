"""`run --pipeline` with two TPUTrainers, from a file that changes directory.

A real run (tiny training): each trainer's Pusher publishes that trainer's
own model as a version of its own in the shared serving folder, the summary
lists every trainer with its own version, and the printed paths work from
the user's directory though the pipeline file `os.chdir`s and gives
relative paths (issue 38 items 2 and 12).
"""

import filecmp
import os
import shutil
import textwrap

import pytest

from tests.fixtures import serving_data
from tfx_tpu_trainer_cli import main as cli

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
PENGUIN_MODULE = os.path.join(REPO, 'examples', 'penguin_tpu',
                              'penguin_tpu_module.py')

# Changes into `elsewhere/` when imported; its roots are relative to it.
_TWO_TRAINERS = '''
import os

from tfx import v1 as tfx
from tfx_tpu_trainer import TPUTrainer

HERE = os.path.dirname(os.path.abspath(__file__))
os.chdir(os.path.join(HERE, 'elsewhere'))


def _trainer(transform, schema_gen, steps, name):
  return TPUTrainer(
      module_file=os.path.join(HERE, 'penguin_tpu_module.py'),
      examples=transform.outputs['transformed_examples'],
      transform_graph=transform.outputs['transform_graph'],
      schema=schema_gen.outputs['schema'],
      train_args=tfx.proto.TrainArgs(num_steps=steps),
      eval_args=tfx.proto.EvalArgs(num_steps=2),
      custom_config={'train_batch_size': 16, 'eval_batch_size': 16,
                     'show_progress': False}).with_id(name)


def _pusher(trainer, name):
  return tfx.components.Pusher(
      model=trainer.outputs['model'],
      push_destination=tfx.proto.PushDestination(
          filesystem=tfx.proto.PushDestination.Filesystem(
              base_directory='serving'))).with_id(name)


def create_pipeline():
  example_gen = tfx.components.CsvExampleGen(input_base=DATA_ROOT)
  statistics_gen = tfx.components.StatisticsGen(
      examples=example_gen.outputs['examples'])
  schema_gen = tfx.components.SchemaGen(
      statistics=statistics_gen.outputs['statistics'],
      infer_feature_shape=True)
  transform = tfx.components.Transform(
      examples=example_gen.outputs['examples'],
      schema=schema_gen.outputs['schema'],
      module_file=os.path.join(HERE, 'penguin_tpu_module.py'))
  small = _trainer(transform, schema_gen, 4, 'SmallTrainer')
  large = _trainer(transform, schema_gen, 12, 'LargeTrainer')
  return tfx.dsl.Pipeline(
      pipeline_name='two-trainers', pipeline_root='root',
      components=[example_gen, statistics_gen, schema_gen, transform, small,
                  large, _pusher(small, 'SmallPusher'),
                  _pusher(large, 'LargePusher')])
'''


def _summary_blocks(out):
  """`TPUTrainer 'id':` -> its summary lines, label -> value."""
  blocks = {}
  current = None
  for line in out[out.index('Pipeline finished'):].splitlines():
    if line.startswith("  TPUTrainer '"):
      current = blocks.setdefault(line.split("'")[1], {})
    elif line.startswith('    ') and current is not None:
      label, _, value = line.strip().partition(':')
      current[label] = value.strip()
    elif line.startswith('  '):
      current = None
  return blocks


def _same_model(left, right):
  """The two SavedModel folders hold the same files with the same bytes."""
  comparison = filecmp.dircmp(left, right)
  match, mismatch, errors = filecmp.cmpfiles(
      left, right, comparison.common_files, shallow=False)
  return (not comparison.left_only and not comparison.right_only and
          not mismatch and not errors and
          all(_same_model(os.path.join(left, d), os.path.join(right, d))
              for d in comparison.common_dirs))


def test_each_trainer_pushes_its_own_model_and_the_summary_lists_both(
    tmp_path, capfd, monkeypatch):
  work = tmp_path / 'pipeline'
  (work / 'elsewhere').mkdir(parents=True)
  shutil.copy(PENGUIN_MODULE, work)
  data = serving_data.write_penguins(str(tmp_path / 'data'), rows=120)
  (work / 'two.py').write_text(
      f'DATA_ROOT = {data!r}\n' +
      textwrap.dedent(_TWO_TRAINERS))
  user_dir = tmp_path / 'user'
  user_dir.mkdir()
  monkeypatch.chdir(user_dir)  # The pipeline file changes it: put it back.
  assert cli.main(['run', '--pipeline', f'{work / "two.py"}:create_pipeline',
                   '--output-root', 'out']) == 0
  out = capfd.readouterr().out
  elsewhere = work / 'elsewhere'
  assert f'outputs under {elsewhere / "root"} (its pipeline root)' in out
  blocks = _summary_blocks(out)
  assert sorted(blocks) == ['LargeTrainer', 'SmallTrainer'], out
  serving = elsewhere / 'serving'
  versions = sorted(os.listdir(serving))
  assert len(versions) == 2, versions
  pushed = {name: block['Pushed model'] for name, block in blocks.items()}
  assert sorted(pushed.values()) == [str(serving / v) for v in versions]
  for name, block in blocks.items():
    # Every path printed is absolute, under the folder the file moved to.
    for label in ('Pushed model', 'Trained model', 'Training report'):
      assert block[label].startswith(str(elsewhere / 'root')) or (
          label == 'Pushed model' and block[label].startswith(str(serving))
      ), (name, label, block[label])
      assert os.path.exists(block[label]), (name, label, block[label])
    logdir = block['TensorBoard logs'].split()[-1]
    assert os.path.isdir(logdir) and os.path.isabs(logdir), logdir
    # The version holds this trainer's model, not the other one's.
    model = os.path.join(block['Trained model'], 'Format-Serving')
    assert _same_model(model, block['Pushed model']), name
  assert not _same_model(pushed['SmallTrainer'], pushed['LargeTrainer'])
  for label in ('Transform graph', 'Transformed examples'):
    (path,) = [line.split(':', 1)[1].strip() for line in out.splitlines()
               if line.startswith(f'  {label}:')]
    assert os.path.isabs(path) and os.path.isdir(path), (label, path)
  # The log under --output-root, as given from the user's directory.
  assert (user_dir / 'out' / 'logs').is_dir()
