from setuptools import find_packages, setup

setup(
    name="warmstart",
    version="0.1.0",
    description="Application-launch prefetcher: record a cold launch once, prefetch it on every later launch",
    packages=find_packages(include=["warmstart", "warmstart.*"]),
    python_requires=">=3.9",
    install_requires=["click>=8", "matplotlib>=3.5", "pyelftools>=0.29"],
    extras_require={"test": ["pytest", "hypothesis"]},
    entry_points={"console_scripts": ["warmstart = warmstart.main:main"]},
)
