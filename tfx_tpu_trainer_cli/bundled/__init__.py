"""The bundled taxi pipeline and its module files, inside the package.

In the repository they are the source folders `pipelines/` and
`components/` (DESIGN.md's layout); setup.py installs them here, as
`tfx_tpu_trainer_cli.bundled.pipelines` and
`tfx_tpu_trainer_cli/bundled/components/`, so an installed wheel has no
top-level `pipelines` or `components` to clash with anything. An editable
install maps the same names to the source folders. Import the pipelines by
this name: `from tfx_tpu_trainer_cli.bundled.pipelines import taxi_pipeline`.
"""
