"""Classes published through the `yamltrace.classes` entry-point group of the ytplugins_demo distribution."""

from torch import nn

from ytplugins import flags

flags.IMPORTED.append(__name__)


class PluginLayer(nn.Module):
    """A module class a spec can name as `PluginLayer` once the plugin is installed."""

    def forward(self, x):
        return x


def not_a_class() -> None:
    """Published under a plugin name by mistake: loading it must fail."""
