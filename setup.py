"""Package definition for tfx-tpu-trainer."""

import os
import re

import setuptools
from setuptools.command import build_py

_HERE = os.path.dirname(os.path.abspath(__file__))


def _version() -> str:
  """tfx_tpu_trainer/version.py's __version__, read without importing it."""
  with open(os.path.join(_HERE, 'tfx_tpu_trainer', 'version.py')) as f:
    return re.search(r"^__version__ = '([^']+)'", f.read(), re.M).group(1)


# Each pin has its reason in docs/architecture.md ("The stack").
INSTALL_REQUIRES = [
    'tfx[kfp]==1.15.1',
    'tensorflow==2.15.1',
    'tensorflow-estimator==2.15.0',
    'tensorflow-transform==1.15.0',
    'apache-beam[gcp]==2.59.0',
    'kfp==1.8.22',
    # jsonschema 4.25 added rfc3987-syntax to its format-nongpl extra
    # (jupyter-events asks for it), whose import builds a Lark grammar: about
    # 1.3 s of CPU in every process that imports kfp (every tfx.v1 import,
    # every pipeline step's container).
    'jsonschema<4.25',
    # The training progress bar and the training report's plots.
    'tqdm',
    'matplotlib',
]

# The bundled taxi pipeline and its module files: package data of the CLI.
BUNDLED_FOLDERS = ('pipelines', 'components')


class BuildPy(build_py.build_py):
  """Copies pipelines/*.py and components/*.py into the wheel's CLI package.

  They land in tfx_tpu_trainer_cli/bundled/, as data that the CLI loads by
  path (tfx_tpu_trainer_cli/paths.py), not as packages: the wheel has no
  top-level `pipelines` or `components`. An editable install reads them in
  the checkout.
  """

  def run(self):
    super().run()
    if getattr(self, 'editable_mode', False):
      return
    for folder in BUNDLED_FOLDERS:
      target = os.path.join(self.build_lib, 'tfx_tpu_trainer_cli', 'bundled',
                            folder)
      self.mkpath(target)
      for name in sorted(os.listdir(os.path.join(_HERE, folder))):
        if name.endswith('.py'):
          self.copy_file(os.path.join(_HERE, folder, name),
                         os.path.join(target, name))

setuptools.setup(
    name='tfx-tpu-trainer',
    version=_version(),
    description=('A TFX Trainer component that trains a TPUEstimator from a '
                 'user module and exports a dual-tag (serve, serve+tpu) '
                 'SavedModel.'),
    python_requires='>=3.10,<3.11',
    packages=setuptools.find_packages(
        include=['tfx_tpu_trainer', 'tfx_tpu_trainer.*', 'tfx_tpu_trainer_cli',
                 'tfx_tpu_trainer_cli.*']),
    cmdclass={'build_py': BuildPy},
    package_data={'tfx_tpu_trainer.kubeflow': ['proto/*.proto', 'rbac/*.yaml']},
    install_requires=INSTALL_REQUIRES,
    # pytest-xdist: `make test` runs the suite in 3 processes (Makefile).
    # jsonschema: the Kubernetes manifests checked against the API's schemas.
    extras_require={'test': ['pytest', 'pytest-xdist==3.8.0',
                             'jsonschema==4.24.1']},
    entry_points={
        'console_scripts': ['tfx-tpu-trainer=tfx_tpu_trainer_cli.main:main'],
    },
)
