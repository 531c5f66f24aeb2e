"""Live training progress: the bar, the plain lines, and the hook's fetches."""

import fcntl
import io
import os
import pty
import select
import struct
import termios

import numpy as np
import pytest
import tensorflow as tf

from tfx_tpu_trainer.training import curves
from tfx_tpu_trainer.training import progress


class _Terminal(io.StringIO):

  def isatty(self):
    return True


class _Clock:
  """A clock that moves by `step` seconds each time it is read."""

  def __init__(self, step):
    self.now, self.step = 0.0, step

  def __call__(self):
    self.now += self.step
    return self.now


class _ManualClock:
  """A clock that moves only when told."""

  def __init__(self):
    self.now = 0.0

  def __call__(self):
    return self.now


def _model_fn(features, labels, mode):
  weights = tf.compat.v1.get_variable('w', [1, 1])
  loss = tf.reduce_mean(tf.square(tf.matmul(features['x'], weights) - labels))
  train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
      loss, global_step=tf.compat.v1.train.get_global_step())
  return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


def _input_fn():
  x = np.ones((8, 1), np.float32)
  return tf.data.Dataset.from_tensor_slices(({'x': x}, 2 * x)).repeat().batch(4)


class _CountingHook(progress.ProgressHook):
  """The real hook, counting the runs it adds fetches to."""

  fetching_runs = 0

  def before_run(self, run_context):
    args = super().before_run(run_context)
    if args is not None:
      self.fetching_runs += 1
    return args


def _train(tmp_path, reporter, clock, steps=20):
  hook = _CountingHook(reporter, clock=clock)
  estimator = tf.compat.v1.estimator.Estimator(_model_fn, str(tmp_path))
  estimator.train(_input_fn, max_steps=steps, hooks=[hook])
  reporter.close()
  return hook


def test_hook_fetches_only_the_first_and_the_last_run_within_the_interval(
    tmp_path):
  stream = io.StringIO()
  reporter = progress.ProgressReporter(20, 4, stream=stream)
  # The clock never moves: the interval never passes.
  hook = _train(tmp_path, reporter, clock=lambda: 0.0)
  # 20 runs of one step: the first, and the one foreseen to be the last
  # (the step read with a run may be the step before it: a run of margin).
  assert hook.fetching_runs in (2, 3)
  lines = stream.getvalue().splitlines()
  assert lines[0].startswith('Training: step ')
  # No rate yet: the first line says nothing of it.
  assert lines[0].endswith(' loss ' + lines[0].split(' loss ')[-1])
  assert '?' not in lines[0] and 'ETA' not in lines[0]
  assert lines[-1].startswith('Training: step 20/20 (100%), ')
  assert '?' not in lines[-1]


class _LossRecorder(tf.compat.v1.train.SessionRunHook):
  """Fetches the training loss with every run (the loop's, in a host loop)."""

  def begin(self):
    self._loss = tf.compat.v1.get_collection(
        tf.compat.v1.GraphKeys.LOSSES)[-1]
    self.losses = []

  def before_run(self, run_context):
    return tf.compat.v1.train.SessionRunArgs(self._loss)

  def after_run(self, run_context, run_values):
    self.losses.append(float(run_values.results))


def _host_loop_model_fn(features, labels, mode, params):
  del params
  weights = tf.compat.v1.get_variable('w', [1, 1])
  loss = tf.reduce_mean(tf.square(tf.matmul(features['x'], weights) - labels))
  train_op = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(
      loss, global_step=tf.compat.v1.train.get_global_step())
  return tf.compat.v1.estimator.tpu.TPUEstimatorSpec(mode, loss=loss,
                                                     train_op=train_op)


def test_host_loop_runs_show_the_last_loss_and_the_rate(tmp_path):
  """Two runs of 100 steps (the default loop off TPU): both are fetched,
  the last line shows the second loop's loss and an examples/s."""
  from tfx_tpu_trainer import config as config_lib  # pylint: disable=g-import-not-at-top
  from tfx_tpu_trainer.training import estimator_builder  # pylint: disable=g-import-not-at-top
  config = config_lib.TrainerConfig.from_custom_config(
      dict(train_batch_size=4, eval_batch_size=4, use_tpu=False))
  estimator = estimator_builder.build_estimator(
      _host_loop_model_fn, config,
      estimator_builder.build_run_config(config, str(tmp_path)), {})
  stream = io.StringIO()
  reporter = progress.ProgressReporter(200, 4, stream=stream,
                                       clock=_Clock(1.0))
  hook, recorder = _CountingHook(reporter, clock=_Clock(1.0)), _LossRecorder()
  estimator.train(lambda params: _input_fn(), max_steps=200,
                  hooks=[recorder, hook])
  reporter.close()
  assert len(recorder.losses) == 2  # One run per loop of 100 steps.
  assert recorder.losses[0] != recorder.losses[1]
  assert hook.fetching_runs == 2
  lines = stream.getvalue().splitlines()
  assert lines[0] == ('Training: step 100/200 (50%), '
                      f'loss {recorder.losses[0]:.4g}')
  assert lines[-1].startswith('Training: step 200/200 (100%), ')
  rate, loss = lines[-1].split(', ')[1:3]
  # 100 steps of 4 in the run's 1 s (two reads of the 1 s clock apart).
  assert rate == '50 steps/s (200 examples/s)'
  assert loss == f'loss {recorder.losses[1]:.4g}'


def test_hook_fetches_step_and_loss_once_per_interval(tmp_path):
  stream = _Terminal()
  reporter = progress.ProgressReporter(20, 4, stream=stream)
  # Each clock read is 1 s later: past the terminal interval on every run.
  hook = _train(tmp_path, reporter, clock=_Clock(1.0))
  assert hook.fetching_runs == 20
  output = stream.getvalue()
  assert 'Training: 100%' in output and '20/20' in output
  final_bar = output.split('\r')[-1]
  assert 'steps/s (' in final_bar and 'examples/s), loss ' in final_bar
  assert '?' not in final_bar


def test_terminal_bar_prints_evaluations_above_it():
  stream = _Terminal()
  clock = _ManualClock()
  training_clock = curves.TrainingClock(clock)
  reporter = progress.ProgressReporter(100, 32, stream=stream, clock=clock,
                                       training_clock=training_clock)
  reporter.start(0)
  clock.now = 0.5
  reporter.update(25, 0.5)
  clock.now = 1.0
  reporter.update(50, 0.25)
  # The evaluation's 30 s are not training time (the CurvesHook's clock
  # stops at the checkpoint save before it).
  training_clock.stop()
  clock.now = 31.0
  reporter.evaluation({'global_step': 50, 'accuracy': np.float32(0.75),
                       'auc': 0.8125})
  training_clock.start()
  clock.now = 32.0
  reporter.update(100, 0.125, final=True)
  reporter.close()
  output = stream.getvalue()
  assert 'Evaluation at step 50: accuracy=0.75, auc=0.8125\n' in output
  assert '50/100' in output and '100/100' in output
  # 25 steps in 0.5 s, then 50 in 1 s: 50 steps/s, 1,600 examples of 32.
  final_bar = output.split('\r')[-1]
  assert '100/100' in final_bar
  assert final_bar.endswith(
      '50 steps/s (1,600 examples/s), loss 0.125, ETA 0:00:00]\n')
  # tqdm's own rate and time left (evaluations in them) are not shown.
  assert 'it/s' not in output and 'step/s' not in output
  assert '<' not in final_bar
  # Progress lines stay in the log under a bar: only evaluations print.
  assert 'Training: step' not in output


def test_plain_lines_when_not_a_terminal():
  stream = io.StringIO()
  clock = _ManualClock()
  reporter = progress.ProgressReporter(300, 10, stream=stream, clock=clock)
  reporter.start(0)
  for step in range(30, 301, 30):
    clock.now += progress.LINE_INTERVAL_SECS / 3
    reporter.update(step, 1.0 / step, final=step == 300)
  reporter.evaluation({'global_step': 300, 'loss': float('nan')})
  reporter.close()
  lines = stream.getvalue().splitlines()
  # A line per LINE_INTERVAL_SECS (every third update) and the final one.
  assert lines[0].startswith('Training: step 30/300 (10%), ')
  assert [line.split(' (')[0] for line in lines[:-1]] == [
      'Training: step 30/300', 'Training: step 120/300',
      'Training: step 210/300', 'Training: step 300/300']
  assert lines[-2].startswith('Training: step 300/300 (100%), ')
  assert lines[-2].endswith('ETA 0:00:00')
  assert lines[-1] == 'Evaluation at step 300: loss=nan'
  assert '\r' not in stream.getvalue()


def test_eta_from_the_one_rate():
  clock = _ManualClock()
  training_clock = curves.TrainingClock(clock)
  reporter = progress.ProgressReporter(1000, 10, stream=io.StringIO(),
                                       clock=clock,
                                       training_clock=training_clock)
  reporter.start(0)
  clock.now = 1.0
  reporter.update(100, 0.5)  # From the session start: no rate yet.
  assert reporter.progress_line(100) == (
      'Training: step 100/1000 (10%), loss 0.5')
  clock.now = 2.0
  reporter.update(200, 0.25)  # 100 steps/s of 10 examples.
  assert reporter.progress_line(200) == (
      'Training: step 200/1000 (20%), 100 steps/s (1,000 examples/s), '
      'loss 0.25, ETA 0:00:08')
  # A 10 s evaluation: not in the rate, in the time left (300 steps took
  # 13 s so far: 700 more take 30 s).
  training_clock.stop()
  clock.now = 12.0
  training_clock.start()
  clock.now = 13.0
  reporter.update(300, 0.2)
  assert reporter.progress_line(300) == (
      'Training: step 300/1000 (30%), 100 steps/s (1,000 examples/s), '
      'loss 0.2, ETA 0:00:30')


def test_short_run_final_line_has_the_rate_without_evaluations():
  """A 100-step training in plain lines: a first line (no rate yet, and no
  '?'), evaluations every 20 steps inside training, and the final line
  with the rate of training time alone and no '?'."""
  stream = io.StringIO()
  clock = _ManualClock()
  training_clock = curves.TrainingClock(clock)
  reporter = progress.ProgressReporter(100, 64, stream=stream, clock=clock,
                                       training_clock=training_clock)
  reporter.start(0)
  clock.now = 2.0  # The first run: start-up.
  reporter.update(20, 0.7)
  for step in (40, 60, 80, 100):
    clock.now += 0.2  # 20 steps of training...
    training_clock.stop()
    clock.now += 5.0  # ... and an evaluation.
    reporter.evaluation({'global_step': step, 'loss': 0.5})
    training_clock.start()
  reporter.update(100, 0.4, final=True)
  reporter.close()
  lines = [line for line in stream.getvalue().splitlines()
           if line.startswith('Training')]
  assert lines == [
      'Training: step 20/100 (20%), loss 0.7',
      'Training: step 100/100 (100%), 100 steps/s (6,400 examples/s), '
      'loss 0.4, ETA 0:00:00']


def _read_all(descriptor):
  """What the pty holds: reads until a read would wait."""
  chunks = []
  while select.select([descriptor], [], [], 1.0)[0]:
    chunk = os.read(descriptor, 65536)
    if not chunk:
      break
    chunks.append(chunk)
  return b''.join(chunks).decode()


def _on_pty(columns, drive):
  """What `drive(terminal)` writes to a pty of `columns` (0: no size)."""
  primary, secondary = pty.openpty()
  if columns:
    fcntl.ioctl(secondary, termios.TIOCSWINSZ,
                struct.pack('HHHH', 24, columns, 0, 0))
  try:
    with os.fdopen(secondary, 'w', closefd=False) as terminal:
      assert terminal.isatty()
      assert os.get_terminal_size(secondary).columns == columns
      drive(terminal)
      terminal.flush()
      return _read_all(primary).replace('\r\n', '\n')
  finally:
    os.close(primary)
    os.close(secondary)


def test_terminal_of_zero_columns_gets_plain_lines():
  """`script` started from a non-terminal: a terminal of 0 x 0, on which
  tqdm would draw nothing at all."""

  def drive(terminal):
    clock = _ManualClock()
    reporter = progress.ProgressReporter(100, 8, stream=terminal, clock=clock)
    reporter.start(0)
    clock.now = 1.0
    reporter.update(50, 0.5)
    clock.now = 2.0
    reporter.update(100, 0.25, final=True)
    reporter.close()

  assert _on_pty(0, drive).splitlines() == [
      'Training: step 50/100 (50%), loss 0.5',
      'Training: step 100/100 (100%), 50 steps/s (400 examples/s), loss '
      '0.25, ETA 0:00:00']


def _bar_frames(columns, steps_per_update, batch_size=64, train_steps=1000):
  """The bar's frames on a pty of `columns` (the last one is the final)."""

  def drive(terminal):
    clock = _ManualClock()
    reporter = progress.ProgressReporter(train_steps, batch_size,
                                         stream=terminal, clock=clock)
    reporter.start(0)
    for step in range(steps_per_update, train_steps + 1, steps_per_update):
      clock.now += 0.32
      reporter.update(step, 0.1942, final=step == train_steps)
    reporter.close()

  return [frame.strip('\n') for frame in _on_pty(columns, drive).split('\r')
          if frame.strip()]


def test_an_80_column_terminal_gets_whole_bar_lines():
  frames = _bar_frames(80, 500)
  # tqdm draws the bar to the terminal's width; nothing is cut off.
  assert all(len(frame) <= 80 for frame in frames), frames
  final = frames[-1]
  assert '1000/1000' in final and final.endswith(
      ', 1,562 steps/s, loss 0.1942, ETA 0:00:00]'), final
  halfway = [frame for frame in frames if '500/1000' in frame][-1]
  assert halfway.endswith(', loss 0.1942]'), halfway  # No rate yet.


@pytest.mark.parametrize('columns,postfix', [
    (200, ', 1,562 steps/s (100,000 examples/s), loss 0.1942, ETA 0:00:00]'),
    (70, ', loss 0.1942, ETA 0:00:00]'),
    (55, ', ETA 0:00:00]'),
])
def test_a_narrower_terminal_leaves_out_the_least_needed_first(columns,
                                                               postfix):
  final = _bar_frames(columns, 500)[-1]
  assert final.endswith(postfix), final
  assert len(final) <= columns


def test_the_final_line_is_not_repeated_after_the_last_run():
  """A session whose last run was fetched: its end says nothing new."""
  stream = io.StringIO()
  clock = _ManualClock()
  reporter = progress.ProgressReporter(100, 8, stream=stream, clock=clock)
  reporter.start(0)
  clock.now = 1.0
  reporter.update(50, 0.5)
  clock.now = 2.0
  reporter.update(100, 0.25)  # The run foreseen to be the last.
  reporter.update(100, None, final=True)  # The session's end.
  reporter.close()
  assert stream.getvalue().splitlines() == [
      'Training: step 50/100 (50%), loss 0.5',
      'Training: step 100/100 (100%), 50 steps/s (400 examples/s), loss '
      '0.25, ETA 0:00:00']
  stream = io.StringIO()
  reporter = progress.ProgressReporter(100, 8, stream=stream, clock=clock)
  reporter.start(0)
  clock.now = 100.0
  reporter.update(100, 0.25)  # A line (the interval passed) ...
  reporter.update(100, None, final=True)  # ... not repeated.
  assert stream.getvalue().splitlines() == [
      'Training: step 100/100 (100%), loss 0.25']


def test_console_context_sends_progress_to_the_given_stream():
  stream = io.StringIO()
  with progress.console(stream):
    reporter = progress.ProgressReporter(10, 1, clock=_Clock(100.0))
  reporter.start(0)
  reporter.update(10, 0.5, final=True)
  assert 'Training: step 10/10 (100%)' in stream.getvalue()
  assert progress._console is None  # pylint: disable=protected-access


def test_evaluation_reporter_is_an_exporter_of_train_and_evaluate(tmp_path):
  stream = io.StringIO()
  reporter = progress.ProgressReporter(6, 4, stream=stream)

  def model_fn(features, labels, mode):
    spec = _model_fn(features, labels, mode)
    return spec._replace(eval_metric_ops={
        'mse': tf.compat.v1.metrics.mean_squared_error(
            labels, tf.zeros_like(labels))})

  estimator = tf.compat.v1.estimator.Estimator(
      model_fn, str(tmp_path),
      config=tf.estimator.RunConfig(save_checkpoints_steps=3))
  tf.estimator.train_and_evaluate(
      estimator,
      tf.estimator.TrainSpec(_input_fn, max_steps=6,
                             hooks=[reporter.hook()]),
      tf.estimator.EvalSpec(_input_fn, steps=1, throttle_secs=0,
                            exporters=[reporter.exporter()]))
  reporter.close()
  evaluations = [line for line in stream.getvalue().splitlines()
                 if line.startswith('Evaluation')]
  # One line per checkpoint (every 3 steps); labels 2 against zeros: mse 4.
  assert [line.split(':')[0] for line in evaluations] == [
      'Evaluation at step 3', 'Evaluation at step 6']
  assert all(line.endswith(', mse=4') for line in evaluations)


@pytest.mark.parametrize('value,expected', [
    ({'global_step': 7, 'b': 2, 'a': np.float64(0.5)}, 'a=0.5, b=2'),
    ({'vector': np.ones(3), 'x': 'text'}, ''),
])
def test_format_metrics(value, expected):
  assert progress.format_metrics(value) == expected
