"""The packages (the rest of the configuration is pyproject.toml): graphgrad's, and the
examples/ folder installed as ``graphgrad.examples``, so that ``graphgrad lecture``'s
topics that run an example work from a wheel as from a clone. A mapped folder cannot be
written in pyproject.toml's ``packages.find``, hence this file."""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["graphgrad*"]), "graphgrad.examples"],
      package_dir={"graphgrad.examples": "examples"})
