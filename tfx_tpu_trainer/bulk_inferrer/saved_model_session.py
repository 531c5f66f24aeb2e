"""Loads one meta graph of a SavedModel into a TF1 session, on the TPU or not."""

from typing import Any, Dict, Mapping, Optional, Sequence

from absl import logging
import tensorflow as tf

from tfx_tpu_trainer import config as config_lib


class LoadedModel:
  """A session holding the loaded meta graph; `run` is `Session.run`.

  On a TPU the session initialised the TPU system before loading, and
  `close` shuts it down. Beam's MultiProcessShared proxies `run` and `close`
  to the one process of a host that holds the TPU.
  """

  def __init__(self, session: tf.compat.v1.Session, tags: Sequence[str],
               shutdown: Optional[tf.Operation] = None,
               topology: Optional[Dict[str, Any]] = None):
    self._session = session
    self._shutdown = shutdown
    self.tags = tuple(tags)
    self.topology = topology or {}

  def run(self, fetches: Any, feed_dict: Mapping[str, Any]) -> Any:
    return self._session.run(fetches, feed_dict=feed_dict)

  def describe(self) -> Dict[str, Any]:
    """The tag set and, on a TPU, the topology (a proxy returns plain data)."""
    return {'tags': list(self.tags), **self.topology}

  def close(self) -> None:
    if self._shutdown is not None:
      self._session.run(self._shutdown)
      self._shutdown = None
    self._session.close()


def _tpu_session(graph: tf.Graph, tpu: Optional[config_lib.TPUSpec]):
  """A session on the TPU, its system initialised; shutdown op, topology."""
  spec = tpu or config_lib.TPUSpec(name='local')
  resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
      tpu=spec.name, zone=spec.zone, project=spec.project)
  session_config = tf.compat.v1.ConfigProto(allow_soft_placement=True)
  cluster_spec = resolver.cluster_spec()
  if cluster_spec and cluster_spec.as_dict():
    session_config.cluster_def.CopyFrom(cluster_spec.as_cluster_def())
  with graph.as_default():
    initialize = tf.compat.v1.tpu.initialize_system()
    shutdown = tf.compat.v1.tpu.shutdown_system()
  session = tf.compat.v1.Session(resolver.master(), graph=graph,
                                 config=session_config)
  topology = tf.tpu.experimental.Topology(serialized=session.run(initialize))
  described = {'master': resolver.master(),
               'devices': int(topology.num_tasks * topology.num_tpus_per_task),
               'hosts': int(topology.num_tasks)}
  logging.info('Initialised the TPU system for inference: %s', described)
  return session, shutdown, described


def load_saved_model(model_path: str, tags: Sequence[str], use_tpu: bool,
                     tpu: Optional[config_lib.TPUSpec] = None) -> LoadedModel:
  """Loads the meta graph of `tags`; on a TPU after `initialize_system`.

  Args:
    model_path: the SavedModel directory.
    tags: the tag set to load (`{serve, tpu}` on a TPU).
    use_tpu: open the session on the TPU and initialise its system.
    tpu: which TPU (default `local`, a TPU VM's own).

  Returns:
    The loaded model.
  """
  graph = tf.compat.v1.Graph()
  if use_tpu:
    session, shutdown, topology = _tpu_session(graph, tpu)
  else:
    session, shutdown, topology = (
        tf.compat.v1.Session(graph=graph), None, None)
  tf.compat.v1.saved_model.loader.load(session, list(tags), model_path)
  logging.info('Loaded the %s graph of %s.', sorted(tags), model_path)
  return LoadedModel(session, tags, shutdown, topology)
