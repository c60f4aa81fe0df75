"""The compiled record codec (everything else about the package is in pyproject.toml).

Optional: without a C compiler the install goes on and habroker runs the same loops in Python
(habroker/store/native.py; bench/analysis.md, "Compiled record codec").
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "habroker.store._record_codec",
            ["broker_image/habroker/store/_record_codec.pyx"],
            optional=True,
        )
    ]
)
