"""A module that fails at import (test module)."""

import tensorflow_does_not_have_this_module  # pylint: disable=unused-import

LABEL_KEY = 'big_tipper'
