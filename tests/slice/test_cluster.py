"""Which TF_CONFIG layouts train (tests/slice/test_multi_worker.py runs one)."""

import json

import pytest

from tfx_tpu_trainer.slice import cluster


def _tf_config(cluster_spec, task_type, index=0):
  return {'TF_CONFIG': json.dumps({'cluster': cluster_spec,
                                   'task': {'type': task_type,
                                            'index': index}})}


@pytest.mark.parametrize('cluster_spec,use_tpu,message', [
    ({'chief': ['a:1'], 'worker': ['b:1'], 'ps': ['c:1']}, False,
     'TF_CONFIG names ps tasks (cluster: chief x1, ps x1, worker x1)'),
    ({'chief': ['a:1'], 'worker': ['b:1']}, True,
     'names several training tasks (cluster: chief x1, worker x1) but '
     'use_tpu is true'),
    ({'worker': ['a:1', 'b:1']}, False,
     'TF_CONFIG names worker tasks but no chief'),
])
def test_cluster_layouts_that_cannot_finish_are_refused(cluster_spec,
                                                        use_tpu, message):
  with pytest.raises(cluster.ClusterError) as error:
    cluster.check_cluster(use_tpu, _tf_config(cluster_spec, 'worker'))
  assert message in str(error.value)


def test_workers_keep_variables_on_the_chief():
  spec = {'chief': ['a:1'], 'worker': ['b:1', 'c:1']}
  assert cluster.check_cluster(False, _tf_config(spec, 'worker', 1)) is None
  overrides = cluster.run_config_overrides(_tf_config(spec, 'worker', 1))
  assert list(overrides['session_config'].device_filters) == [
      '/job:chief', '/job:worker/task:1']
  assert cluster.run_config_overrides(
      _tf_config({'chief': ['a:1']}, 'chief')) == {}
  assert cluster.eval_throttle_secs(
      _tf_config(spec, 'evaluator')) == cluster.EVALUATOR_THROTTLE_SECS
