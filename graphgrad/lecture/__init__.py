"""Layer ``lecture`` (above every feature it shows, below ``cli``): the lecture on
autodiff and computational graphs that graphgrad comes from, as a map of its topics in
order and a demonstration per topic: ``graphgrad lecture`` prints the map,
``graphgrad lecture TOPIC`` runs one (``run_topic``), printing what to look for and
writing its pictures."""

from .topics import TOPICS, Topic, run_topic, topic, topic_map

__all__ = ["TOPICS", "Topic", "topic", "topic_map", "run_topic"]
