"""Layer ``fx``: torch.fx's ``fx.passes`` that graphgrad has (``shape_prop.ShapeProp``)."""

from .shape_prop import ShapeProp

__all__ = ["ShapeProp"]
