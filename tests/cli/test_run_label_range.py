"""Issue 25 item 7 in a pipeline: a label outside the model's classes stops
the run at the TPUTrainer, before training, with the label error; the
Evaluator never runs (it used to fail with a raw TFMA error)."""

import csv
import os
import sqlite3

import pytest

from tests.conftest import write_taxi_slice
from tests.fixtures.run_settings import LINEAR_MODULE
from tfx_tpu_trainer_cli import main as cli

pytestmark = [pytest.mark.slow, pytest.mark.heavy]


def _label_two_in_every_tenth_row(data_dir):
  path = os.path.join(data_dir, 'data.csv')
  with open(path, newline='') as f:
    rows = list(csv.DictReader(f))
    fields = list(rows[0])
  for index, row in enumerate(rows):
    if index % 10 == 0:
      row['big_tipper'] = '2'
  with open(path, 'w', newline='') as f:
    writer = csv.DictWriter(f, fields)
    writer.writeheader()
    writer.writerows(rows)


def test_label_outside_the_classes_stops_the_run_at_the_trainer(tmp_path,
                                                                capfd):
  data = write_taxi_slice(str(tmp_path / 'data'), rows=300)
  _label_two_in_every_tenth_row(data)
  output_root = tmp_path / 'out'
  code = cli.main(['run', '--data-root', data, '--output-root',
                   str(output_root), '--module-file', LINEAR_MODULE,
                   '--train-steps', '5', '--eval-steps', '1',
                   '--train-batch-size', '16', '--eval-batch-size', '16'])
  captured = capfd.readouterr()
  output = captured.out + captured.err
  assert code == 1, output
  assert ("The label 'big_tipper' of the 'train' split has values the model "
          'cannot take: 2 (record ') in output, output
  assert ('(sigmoid cross-entropy) accepts values in [0, 1]; checked the '
          'first 4 batches of each split') in output
  database = output_root / 'metadata' / 'taxi_tpu' / 'metadata.db'
  components = {name.split('.')[-1] for (name,) in sqlite3.connect(
      str(database)).execute(
          "SELECT name FROM Context WHERE name LIKE '%.%'").fetchall()}
  assert 'TPUTrainer' in components and 'Evaluator' not in components, (
      components)
