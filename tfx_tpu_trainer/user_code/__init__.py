"""A user's code: the module loaded and read, named by import path, packaged as wheels."""
