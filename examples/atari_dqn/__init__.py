"""Distributed DQN on Atari with actorrt: collectors stream replay data to one learner.

Run ``python -m examples.atari_dqn --help``; see README.md in this folder.
"""
