"""The CLI processes that several files of tests/cli/ read, run once."""

from tests.fixtures.cli_processes import penguin_run_without_data  # pylint: disable=unused-import
from tests.fixtures.cli_processes import taxi_compile_with_a_secret  # pylint: disable=unused-import
