"""A training run's set-up, shared by the executor and the preflight CLI."""

import dataclasses
from typing import Any, Dict, List, Mapping, Optional

from tensorflow_metadata.proto.v0 import schema_pb2
from tfx.components.trainer import fn_args_utils

from tfx_tpu_trainer import config as config_lib
from tfx_tpu_trainer import user_module as user_module_lib
from tfx_tpu_trainer.data import input_fns
from tfx_tpu_trainer.data import schemas as schemas_lib
from tfx_tpu_trainer.model_fn import dispatch
from tfx_tpu_trainer.model_fn import keras_adapter
from tfx_tpu_trainer.model_fn import embedding_spec
from tfx_tpu_trainer.model_fn import keras_run_fn
from tfx_tpu_trainer.model_fn import stock_trainer
from tfx_tpu_trainer.publishing import serving
from tfx_tpu_trainer.publishing import serving_inputs

__all__ = ['LABEL_KEY_FLAG_NOTE', 'hyperparameter_values', 'build_params',
           'PreparedRun', 'prepare_run', 'model_fn_source']

# Where command-line users set custom_config['label_key'].
LABEL_KEY_FLAG_NOTE = 'tfx-tpu-trainer run: --label-key'


def hyperparameter_values(
    hyperparameters: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
  """Flat name -> value mapping of a hyperparameters artifact's JSON.

  Accepts the KerasTuner `HyperParameters.get_config()` layout that TFX's
  Tuner writes (`{'space': [...], 'values': {...}}`, possibly nested under
  `config`), or a plain mapping of names to values.

  Args:
    hyperparameters: fn_args.hyperparameters.

  Returns:
    The hyperparameter values.
  """
  if not hyperparameters:
    return {}
  if isinstance(hyperparameters.get('config'), Mapping):
    hyperparameters = hyperparameters['config']
  if isinstance(hyperparameters.get('values'), Mapping):
    return dict(hyperparameters['values'])
  return dict(hyperparameters)


def build_params(config: config_lib.TrainerConfig,
                 hyperparameters: Optional[Mapping[str, Any]],
                 train_steps: Optional[int] = None,
                 eval_steps: Optional[int] = None,
                 model_dir: Optional[str] = None) -> Dict[str, Any]:
  """The params model_fn and input_fn get (TPUEstimator adds the rest).

  `custom_config['params']`, the tuned hyperparameters over them, and what
  TPUTrainer sets itself where a tensorflow/tpu model reads its FLAGS: the
  config's (`TrainerConfig.config_params`) and `train_steps`, `eval_steps`
  and `model_dir` when known (docs/reference/tpu_estimator.md, "Where flags
  go").
  TPUEstimator adds `batch_size` and `use_tpu` itself in every mode.

  Args:
    config: the validated trainer config.
    hyperparameters: fn_args.hyperparameters.
    train_steps: train_args.num_steps, if known.
    eval_steps: eval_args.num_steps, if set.
    model_dir: the estimator's model_dir, if known.

  Returns:
    The params.

  Raises:
    ConfigError: when a hyperparameter uses a name TPUEstimator reserves, or
      a given param disagrees with the value TPUTrainer sets.
  """
  values = hyperparameter_values(hyperparameters)
  reserved = sorted(set(values) & set(config_lib.RESERVED_PARAMS_KEYS))
  if reserved:
    raise config_lib.ConfigError(
        f'Hyperparameter(s) {reserved} use names TPUEstimator reserves; '
        'rename them in the tuner search space.')
  derived = config.config_params()
  run_values = {'train_steps': train_steps, 'eval_steps': eval_steps,
                'model_dir': model_dir}
  derived.update({key: value for key, value in run_values.items()
                  if value is not None})
  config_lib.check_derived_params(config.params, derived,
                                  "custom_config['params']")
  config_lib.check_derived_params(values, derived,
                                  'the tuned hyperparameters')
  params = dict(config.params)
  params.update(values)
  params.update(derived)
  return params


@dataclasses.dataclass(frozen=True)
class PreparedRun:
  """What the steps of a training run share, decided once."""
  module: user_module_lib.UserModule
  schemas: Optional[schemas_lib.ExampleSchemas]
  label_key: Optional[str]
  params: Dict[str, Any]
  model_fn: dispatch.ModelFn
  # None when there is neither a schema nor a module serving function.
  serving_input_receiver_fn: Optional[serving.ServingInputReceiverFn]
  # The raw features the default serving input parses (None: the module's
  # serving input, or no schema).
  serving_features: Optional[serving_inputs.ServingFeatures] = None
  # The module's TPU embedding tables (`embedding_config_spec`), if any.
  embedding: Optional[embedding_spec.EmbeddingSpec] = None

  def input_fn(self,
               file_pattern: List[str],
               data_accessor: Optional[fn_args_utils.DataAccessor],
               training: bool,
               repeat: bool,
               cache: str,
               schema: Optional[schema_pb2.Schema] = None,
               shuffle: str = 'window',
               cache_dir: Optional[str] = None,
               table_first: bool = False) -> input_fns.InputFn:
    """The `input_fn(params)` of one split: the module's, else the default.

    Args:
      file_pattern: the split's file patterns.
      data_accessor: handed to a module's input_fn.
      training: shuffle when true.
      repeat: repeat the split forever.
      cache: the default chain's cache mode (config.input_cache).
      schema: parses the examples (default: the run's example schema).
      shuffle: the default chain's shuffle (config.input_shuffle).
      cache_dir: where input_cache="disk" keeps the parsed split.
      table_first: build the parsed table before the first batch
        (input_fns.default_dataset).

    Returns:
      The input function.

    Raises:
      config_lib.ConfigError: when the default input needs a label key and
        none was given.
    """
    if self.module.input_fn is None and self.label_key is None:
      raise config_lib.ConfigError(
          f'No label key: set {user_module_lib.LABEL_KEY_ATTRIBUTE} in '
          f"{self.module.module_file} or custom_config['label_key'] to the "
          f'label feature ({LABEL_KEY_FLAG_NOTE}).')
    if schema is None and self.schemas is not None:
      schema = self.schemas.examples
    return input_fns.make_input_fn(
        file_pattern, data_accessor, schema, self.label_key,
        training=training, repeat=repeat,
        module_input_fn=self.module.input_fn, cache=cache, shuffle=shuffle,
        cache_dir=cache_dir, table_first=table_first)


def prepare_run(config: config_lib.TrainerConfig,
                module: user_module_lib.UserModule,
                schemas: Optional[schemas_lib.ExampleSchemas],
                hyperparameters: Optional[Mapping[str, Any]] = None,
                fn_args: Optional[fn_args_utils.FnArgs] = None,
                model_dir: Optional[str] = None) -> PreparedRun:
  """Decides the label key, params, model_fn and serving input of a run.

  Args:
    config: the validated trainer config.
    module: the loaded user module.
    schemas: the example schemas (None: the preflight CLI without a schema).
    hyperparameters: fn_args.hyperparameters (tuned values), if any.
    fn_args: the run's FnArgs, handed to a stock module's trainer_fn or
      Keras run_fn (default: FnArgs naming only the transform graph); its
      train and eval steps reach params.
    model_dir: where the estimator trains, as `params['model_dir']`.

  Returns:
    The prepared run.

  Raises:
    TPUTrainerError: a label key missing from the schema, a hyperparameter
      with a reserved name, a raw_label_key missing from the raw schema or
      needed by a served feature, a stock-Trainer estimator that cannot be
      taken over, an embedding_config_spec TPUEstimator refuses.
  """
  _check_config_for_module(config, module)
  params = build_params(
      config, hyperparameters,
      train_steps=fn_args.train_steps if fn_args else None,
      eval_steps=(fn_args.eval_steps or None) if fn_args else None,
      model_dir=model_dir)
  label_key = config.label_key or module.label_key
  if module.run_fn is not None:
    # The run_fn builds its model: under the bfloat16 policy if asked.
    with keras_adapter.bfloat16_policy(config.bfloat16):
      taken = keras_run_fn.run_fn_model(
          module.run_fn, fn_args or _minimal_fn_args(schemas), label_key)
    model_fn, label_key = taken.model_fn, taken.label_key
  elif module.trainer_fn is not None:
    stock = stock_trainer.stock_model(
        module.trainer_fn, fn_args or _minimal_fn_args(schemas),
        schemas.raw if schemas is not None else None)
    if config.use_tpu:
      stock_trainer.check_for_tpu(stock)
    params = dict(stock.params, **params)
    model_fn = stock.model_fn
  else:
    model_fn = dispatch.model_fn_for_module(module)
  embedding = embedding_spec.load_embedding_spec(module, params)
  if embedding is not None:
    _check_embedding_input_mode(embedding, config)
  label_key = label_key or _stock_label_key(module, schemas)
  if schemas is not None and label_key is not None:
    schemas_lib.check_label_key(
        schemas.examples, label_key,
        'transformed' if schemas.tf_transform_output else 'examples')
  serving_features = None
  if schemas is not None and module.serving_input_receiver_fn is None:
    serving_features = serving_inputs.find_serving_features(
        schemas, label_key, config.raw_label_key)
  elif schemas is not None and config.raw_label_key is not None:
    # The module's serving input decides what it parses; the key is checked.
    serving_inputs.serving_features(schemas.raw_feature_spec(), None, None,
                               config.raw_label_key)
  serving_input_receiver_fn = None
  if schemas is not None or module.serving_input_receiver_fn is not None:
    serving_input_receiver_fn = serving.make_serving_input_receiver_fn(
        schemas, label_key, params, module.serving_input_receiver_fn,
        serving_features)
  return PreparedRun(
      module=module,
      schemas=schemas,
      label_key=label_key,
      params=params,
      model_fn=model_fn,
      serving_input_receiver_fn=serving_input_receiver_fn,
      serving_features=serving_features,
      embedding=embedding)


def _check_embedding_input_mode(embedding: embedding_spec.EmbeddingSpec,
                                config: config_lib.TrainerConfig) -> None:
  """TPUEstimator feeds TPU embeddings from per-host input pipelines only."""
  if config.use_tpu and (config.per_host_input
                         not in embedding_spec.TPU_INPUT_MODES):
    raise config_lib.ConfigError(
        f"custom_config['per_host_input']={config.per_host_input!r}: with "
        f'TPU embeddings ({embedding.where}) TPUEstimator takes only '
        f'{list(embedding_spec.TPU_INPUT_MODES)} (each host enqueues its '
        "share of the ids). Use 'PER_HOST_V2', the default.")


def model_fn_source(module: user_module_lib.UserModule) -> str:
  """How errors about the run's model_fn name it."""
  if module.model_fn is not None:
    return module.model_fn.where
  return f'the model_fn TPUTrainer builds for {module.module_file}'


def _check_config_for_module(config: config_lib.TrainerConfig,
                             module: user_module_lib.UserModule) -> None:
  """Keys that need a module of a kind: refused early for the others.

  Export API v2 leaves the TPU rewrite of inference to a model_fn of the
  module's own; bfloat16 needs a model the module builds.
  """
  if (config.export_to_tpu and config.export_saved_model_api_version == 2 and
      module.model_fn is None):
    raise config_lib.ConfigError(
        "custom_config['export_saved_model_api_version']=2 leaves the TPU "
        f'rewrite of inference to the model_fn, but {module.module_file} has '
        'no model_fn of its own: the one TPUTrainer builds (for a Keras model '
        'or a stock Trainer module) does no TPU inference, so the {serve, '
        'tpu} graph would be a CPU graph. Use export_saved_model_api_version'
        '=1 (the default), or export_to_tpu=false.')
  if config.bfloat16 and module.trainer_fn is not None:
    raise config_lib.ConfigError(
        f"custom_config['bfloat16'] is true, but {module.trainer_fn.where} "
        'returns a stock Estimator, which builds its own float32 graph and '
        'reads no precision from params. Drop the key, or define a model_fn '
        '(or build_keras_model) that builds in bfloat16.')


def _stock_label_key(module: user_module_lib.UserModule,
                     schemas: Optional[schemas_lib.ExampleSchemas]
                     ) -> Optional[str]:
  """The first label key a stock module names that the examples hold."""
  candidates = module.label_key_candidates
  if not candidates or schemas is None:
    return None
  features = schemas_lib.feature_spec(schemas.examples)
  for key in candidates:
    if key in features:
      return key
  raise config_lib.ConfigError(
      f'No label key: {module.module_file} (a stock Trainer module) names '
      f'the label {list(candidates)}, but none is a feature of the '
      f"{'transformed' if schemas.tf_transform_output else 'examples'} "
      f'schema (features: {sorted(features)}). Set '
      f"custom_config['label_key'] (or {user_module_lib.LABEL_KEY_ATTRIBUTE} "
      f'in the module) to the label feature ({LABEL_KEY_FLAG_NOTE}).')


def _minimal_fn_args(schemas: Optional[schemas_lib.ExampleSchemas]
                     ) -> fn_args_utils.FnArgs:
  """FnArgs for a trainer_fn or run_fn outside a pipeline run (preflight)."""
  transform_dir = None
  if schemas is not None and schemas.tf_transform_output is not None:
    transform_dir = schemas.tf_transform_output._transform_output_dir  # pylint: disable=protected-access
  return fn_args_utils.FnArgs(
      train_files=[], eval_files=[], train_steps=1, eval_steps=1,
      transform_output=transform_dir, transform_graph_path=transform_dir,
      custom_config={})
