"""Synthetic data-generating processes and the ``actkit reproduce`` experiments.

``actkit.zoo.shapes`` renders a Shapes3D-like image dataset with known discrete
factors (shape, scale, orientation, position, object hue, background hue); it trains the
vision checkpoints of the shipped zoo (``actkit.zoo``) and serves the disentanglement
experiments. Other modules here hold the seeds' synthetic experiments.
"""
