"""The training report: HTML with embedded plots, and what it says is missing."""

import base64
import html as html_lib
import os
import re
import shutil

import pytest
import tensorflow as tf

from tfx_tpu_trainer.publishing import training_events
from tfx_tpu_trainer.training import curves
from tfx_tpu_trainer.publishing import training_report as report

PNG_SIGNATURE = b'\x89PNG\r\n\x1a\n'


def _write_events(directory, points):
  """Writes `points` [(step, {tag: value})] as v1 scalar summaries."""
  os.makedirs(directory, exist_ok=True)
  with tf.Graph().as_default():  # FileWriter is graph-mode only.
    writer = tf.compat.v1.summary.FileWriter(str(directory))
    for step, values in points:
      summary = tf.compat.v1.Summary(value=[
          tf.compat.v1.Summary.Value(tag=tag, simple_value=value)
          for tag, value in values.items()])
      writer.add_summary(summary, step)
    writer.close()


def _training(model_run, steps=(100, 200, 300)):
  """The estimator's curves and the trainer's (training/curves.py)."""
  _write_events(model_run, [(step, {
      'loss': 1.0 / step, 'global_step/sec': 50.0 + step,
      curves.LOSS_TAG: 1.0 / step,
      curves.STEP_RATE_TAG: 500.0 + step,
      curves.EXAMPLE_RATE_TAG: 64 * (500.0 + step)})
                            for step in steps])


def _evaluations(model_run, steps=(100, 200, 300)):
  _write_events(os.path.join(model_run, 'eval_eval'),
                [(step, {'accuracy': 0.5 + step / 1000, 'auc': 0.6,
                         'loss': 0.7, 'global_step': step})
                 for step in steps])


def _missing(html):
  match = re.search(r'<h2>What is missing</h2><ul>(.*?)</ul>', html, re.S)
  return ([html_lib.unescape(item) for item in
           re.findall(r'<li>(.*?)</li>', match.group(1))] if match else [])


def _embedded_pngs(html):
  return [base64.b64decode(data) for data in
          re.findall(r'src="data:image/png;base64,([^"]+)"', html)]


def test_report_has_curves_tables_and_png_files(tmp_path):
  model_run = str(tmp_path / 'model_run')
  _training(model_run)
  _evaluations(model_run)
  path = report.write_report(
      model_run, final_metrics={'accuracy': 0.8, 'global_step': 300},
      config={'custom_config.train_batch_size': 64},
      timings={'training and evaluation': 75.0})
  assert path == os.path.join(model_run, 'training_report.html')
  html = open(path).read()
  assert _missing(html) == []
  # Loss, steps/s, and each eval metric but the step: accuracy, auc, loss.
  pngs = _embedded_pngs(html)
  assert len(pngs) == 5 and all(p.startswith(PNG_SIGNATURE) for p in pngs)
  assert sorted(os.listdir(os.path.join(model_run, 'training_report'))) == [
      'eval_accuracy.png', 'eval_auc.png', 'eval_loss.png', 'loss.png',
      'steps_per_sec.png']
  for title in ('Training loss',
                report.SPEED_TITLE,
                'Evaluation: accuracy', 'Evaluation: auc',
                'Evaluation: loss'):
    assert f'<img alt="{title}" ' in html
  # Each title is drawn in its plot: no caption repeats it.
  assert '<figcaption>' not in html
  assert '<tr><th>accuracy</th><td>0.8</td></tr>' in html
  assert '<tr><th>custom_config.train_batch_size</th><td>64</td></tr>' in html
  assert ('<tr><th>training and evaluation</th><td>75.0 s (0:01:15)</td>'
          '</tr>') in html
  assert 'first to last training event' in html
  assert not [name for name in os.listdir(model_run) if name.endswith('.tmp')]


def test_no_event_files_still_gives_a_report_saying_so(tmp_path):
  model_run = str(tmp_path / 'model_run')
  os.makedirs(model_run)
  html = open(report.write_report(model_run, final_metrics={})).read()
  assert _missing(html) == [
      f'No event files in {model_run}.',
      f'No event files in {os.path.join(model_run, "eval_eval")}.',
      'No training "training/loss" values in the event files: the '
      '"Training loss" plot is missing.',
      'No training "training/steps_per_sec" values in the event files (it '
      'needs two loss points): the "Training speed (saves and evaluations '
      'left out; evaluations dotted)" plot is missing.',
      'No evaluation metrics in the event files: the evaluation curves are '
      'missing.',
      'No final evaluation metrics were recorded.',
  ]
  assert 'No curves: the event files held no values to plot.' in html
  assert _embedded_pngs(html) == []


def test_zero_evaluations(tmp_path):
  model_run = str(tmp_path / 'model_run')
  _training(model_run)
  html = open(report.write_report(model_run, final_metrics={'auc': 0.5})
             ).read()
  assert _missing(html) == [
      f'No event files in {os.path.join(model_run, "eval_eval")}.',
      'No evaluation metrics in the event files: the evaluation curves are '
      'missing.']
  assert len(_embedded_pngs(html)) == 2


def test_a_single_evaluation_is_named_as_one_point(tmp_path):
  model_run = str(tmp_path / 'model_run')
  _training(model_run)
  _evaluations(model_run, steps=(300,))
  html = open(report.write_report(model_run, final_metrics={'auc': 0.6})
             ).read()
  assert _missing(html) == [
      'Only one evaluation (step 300): each evaluation curve is a single '
      "point. Evaluate during training with custom_config['eval_every_steps']"
      '.']


def test_unreadable_event_files(tmp_path):
  model_run = str(tmp_path / 'model_run')
  _training(model_run)
  [events] = [name for name in os.listdir(model_run)
              if name.startswith('events.out.tfevents')]
  data = open(os.path.join(model_run, events), 'rb').read()
  # A truncated copy: the records before the cut still count.
  with open(os.path.join(model_run, events + '.truncated'), 'wb') as f:
    f.write(data[:len(data) - 10])
  eval_dir = os.path.join(model_run, 'eval_eval')
  os.makedirs(eval_dir)
  with open(os.path.join(eval_dir, 'events.out.tfevents.1.garbage'),
            'wb') as f:
    f.write(b'this is not a TFRecord file at all' * 3)
  html = open(report.write_report(model_run, final_metrics={'auc': 0.5})
             ).read()
  missing = _missing(html)
  assert len(missing) == 3
  assert missing[0].startswith(
      f'{os.path.join(model_run, events)}.truncated could not be read after 3 '
      'record(s) (')
  assert missing[0].endswith('); what it held after that is missing.')
  assert missing[1].startswith(
      f'{eval_dir}/events.out.tfevents.1.garbage could not be read after 0 '
      'record(s) (')
  assert missing[2].startswith('No evaluation metrics in the event files')
  # The intact file still gives both training plots.
  assert len(_embedded_pngs(html)) == 2


def test_non_finite_values_are_left_out_and_named(tmp_path):
  model_run = str(tmp_path / 'model_run')
  _write_events(model_run, [(1, {'loss': 0.5}), (2, {'loss': float('nan')}),
                            (3, {'loss': float('inf')}), (4, {'loss': 0.25}),
                            (4, {'global_step/sec': 10.0})])
  _evaluations(model_run)
  html = open(report.write_report(
      model_run, final_metrics={'auc': float('nan'), 'accuracy': 0.5})).read()
  assert _missing(html) == [
      'loss: 2 non-finite value(s) (NaN or infinity) at step(s) 2, 3 left '
      'out of the plot.',
      "Final metrics ['auc'] are not finite numbers."]
  scalars = training_events.read_scalars(model_run)
  assert scalars.series['loss'] == [(1, 0.5), (4, 0.25)]
  assert '<tr><th>auc</th><td>nan</td></tr>' in html


def test_tf2_tensor_summaries_are_read(tmp_path):
  writer = tf.summary.create_file_writer(str(tmp_path))
  with writer.as_default():
    for step in (1, 2):
      tf.summary.scalar('loss', 1.0 / step, step=step)
  writer.close()
  assert training_events.read_scalars(str(tmp_path)).series == {
      'loss': [(1, 1.0), (2, 0.5)]}


def test_a_report_that_cannot_be_written_is_logged_not_raised(
    tmp_path, absl_warnings):
  blocked = tmp_path / 'model_run'
  blocked.write_text('a file where the model_run directory should be')
  assert report.write_report_safely(str(blocked), final_metrics={}) is None
  assert (f'The training report could not be written in {blocked}'
          in absl_warnings.text)
  assert 'training and its outputs are not affected' in absl_warnings.text


@pytest.mark.parametrize('tag,file_name', [
    ('auc_precision_recall', 'eval_auc_precision_recall.png'),
    ('label/mean', 'eval_label_mean.png'),
])
def test_eval_plot_file_names(tmp_path, tag, file_name):
  model_run = str(tmp_path)
  _write_events(os.path.join(model_run, 'eval_eval'),
                [(1, {tag: 0.5}), (2, {tag: 0.6})])
  report.write_report(model_run)
  assert file_name in os.listdir(os.path.join(model_run, 'training_report'))


def test_speed_plot_is_the_trainers_with_evaluations_marked(tmp_path):
  """The trainer's speed (evaluations left out), evaluations as dotted
  lines; the estimator's global_step/sec only for event files without it."""
  model_run = str(tmp_path / 'model_run')
  _training(model_run)
  _evaluations(model_run, steps=(100, 200, 300))
  train = training_events.read_scalars(model_run)
  evals = training_events.read_scalars(os.path.join(model_run, 'eval_eval'))
  plots = {plot.file_name: plot
           for plot in report._train_plots(train, [100, 200, 300], [])}  # pylint: disable=protected-access
  speed = plots['steps_per_sec.png']
  assert speed.title == (
      'Training speed (saves and evaluations left out; evaluations dotted)')
  assert speed.png == report.plot_png(
      speed.title, {'steps/s': train.series[curves.STEP_RATE_TAG]},
      marks=[100, 200, 300], right_axis=('examples/s', 64.0))
  assert speed.png != report.plot_png(
      speed.title, {'steps/s': train.series[curves.STEP_RATE_TAG]},
      right_axis=('examples/s', 64.0))
  assert report._evaluation_steps(evals) == [100, 200, 300]  # pylint: disable=protected-access
  assert plots['loss.png'].png == report.plot_png(
      'Training loss', {'loss': train.series[curves.LOSS_TAG]})


def test_event_files_of_the_estimator_alone_still_plot(tmp_path):
  model_run = str(tmp_path / 'model_run')
  _write_events(model_run, [(step, {'loss': 1.0 / step,
                                    'global_step/sec': 50.0 + step})
                            for step in (100, 200)])
  train = training_events.read_scalars(model_run)
  problems = []
  plots = report._train_plots(train, [], problems)  # pylint: disable=protected-access
  assert [plot.title for plot in plots] == [
      'Training loss', 'Training speed (steps/s, evaluations included)']
  assert problems == []


def test_config_table_masks_values_of_secret_named_options(tmp_path):
  """Issue 38 item 11: the KFP UI shows the report inline."""
  model_run = str(tmp_path / 'model_run')
  _training(model_run)
  path = report.write_report(
      model_run, config={'custom_config.params': {
          'api_token': 'tok-123', 'dbPassword': 'pw-456',
          'private_key': 'pk-789', 'hidden_units': 8},
                         'label_key': 'tips'})
  html = open(path).read()
  for value in ('tok-123', 'pw-456', 'pk-789'):
    assert value not in html
  assert 'api_token' in html and '***' in html
  assert "&#x27;hidden_units&#x27;: 8" in html or "'hidden_units': 8" in html
  assert '<tr><th>label_key</th><td>tips</td></tr>' in html


# Writes the report and is SIGKILLed as it is about to rename a temporary
# file whose name starts with the prefix into place: the file is written
# and not renamed, as a writer killed mid-write leaves it.
_REPORT_WRITER = '''
import os, signal, sys
from tfx.dsl.io import fileio
from tfx_tpu_trainer.publishing import training_report
model_run, prefix = sys.argv[1:]
rename = fileio.rename
def rename_unless_killed(source, *args, **kwargs):
  name = os.path.basename(source)
  if name.startswith(prefix) and name.endswith('.tmp'):
    os.kill(os.getpid(), signal.SIGKILL)
  return rename(source, *args, **kwargs)
fileio.rename = rename_unless_killed
training_report.write_report(model_run, final_metrics={'accuracy': 0.8})
'''


def _kill_writer_mid_write(model_run, plots_dir, prefix):
  """A report writer SIGKILLed before its first `prefix*.tmp` is renamed.

  Returns:
    The temporary files the killed writer left.
  """
  import signal  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  writer = subprocess.run([sys.executable, '-c', _REPORT_WRITER, model_run,
                           prefix], capture_output=True, text=True,
                          check=False)
  assert writer.returncode == -signal.SIGKILL, writer.stderr[-3000:]
  return [n for n in os.listdir(plots_dir) if n.endswith('.tmp')]


@pytest.mark.slow
def test_a_killed_report_writer_leaves_nothing_after_the_next_write(tmp_path):
  model_run = str(tmp_path / 'model_run')
  _training(model_run)
  _evaluations(model_run)
  plots_dir = os.path.join(model_run, report.PLOTS_DIR_NAME)
  # Killed while writing an evaluation curve ...
  left = _kill_writer_mid_write(model_run, plots_dir, 'eval_')
  assert all(n.endswith('.png.tmp') for n in left), left
  # ... and while writing the page.
  with open(report.report_path(model_run) + '.tmp', 'w') as f:
    f.write('<html><body>partial')
  # The next report has no evaluation curves (e.g. a retry that wrote none),
  # so no write of its own replaces the temporary files.
  shutil.rmtree(os.path.join(model_run, 'eval_eval'))
  report.write_report(model_run, final_metrics={'accuracy': 0.8})
  assert not [n for n in os.listdir(plots_dir) if n.endswith('.tmp')]
  assert not [n for n in os.listdir(model_run) if n.endswith('.tmp')]
  for name in os.listdir(plots_dir):
    with open(os.path.join(plots_dir, name), 'rb') as f:
      assert f.read().startswith(PNG_SIGNATURE), name
