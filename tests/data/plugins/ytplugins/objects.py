"""Things a spec may name that are not nn.Module classes: a function, an instance, a plain class."""

from torch import nn


def make_layer() -> nn.Module:
    """A factory function (a spec must refuse it: it is not a class)."""
    return nn.Identity()


layer = nn.Identity()


class NotAModule:
    """A class that is not an nn.Module subclass."""


class Outer:
    """Holds a nested module class, reachable as `ytplugins.objects:Outer.Inner`."""

    class Inner(nn.Module):
        def forward(self, x):
            return x


class Identity(nn.Module):
    """Shares its name with `torch.nn.Identity`, to show that `imports` are searched in order."""

    def forward(self, x):
        return x
