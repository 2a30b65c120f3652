"""A module whose import has a visible side effect: it appends its name to `ytplugins.flags.IMPORTED`."""

from torch import nn

from ytplugins import flags

flags.IMPORTED.append(__name__)


class SideEffectLayer(nn.Module):
    """An ordinary module class, reachable only by importing this module."""

    def forward(self, x):
        return x
