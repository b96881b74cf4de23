"""The paper's resource model (§IV-A) as a mock platform: ``n_C`` clusters of ``n_H`` hosts, the
i-th ``1 + 0.1 (i - 1)`` times faster than the first, joined by a hierarchical WAN.

The paper says only "a hierarchical model of a WAN, with latencies typically found over the
Internet". Ours: clusters pair up in sites, sites pair up in regions; a link inside a site is a
campus network, between sites of a region a national research network, between regions an
intercontinental path. The figures are typical ones, not measurements.
"""

from __future__ import annotations

from coorm_bridge.batchsim import ClusterSpec, PlatformSpec
from coorm_bridge.core.model import ClusterInfo, Interconnect, Link

#: The paper's cluster size.
HOSTS = 128
#: Latency (s) and bandwidth (bit/s) between two clusters, by how far apart they are.
SAME_SITE = (0.0002, 10e9)
SAME_REGION = (0.010, 1e9)
ACROSS_REGIONS = (0.100, 100e6)
#: Clusters per site and sites per region.
SITE, REGION = 2, 4


def cluster_name(index: int) -> str:
    """``c1``, ``c2``...: the i-th cluster (from 1)."""
    return f"c{index}"


def paper_platform(clusters: int, hosts: int = HOSTS, start: int = 0) -> PlatformSpec:
    """The resource model as a mock platform description (no background load: in the paper's
    scalability and fairness experiments CooRM manages every host)."""
    if not 1 <= clusters <= 64:
        raise ValueError(f"1 to 64 clusters, not {clusters}")
    specs = [
        ClusterSpec(name=cluster_name(i), hosts=hosts, speed=round(1 + 0.1 * (i - 1), 3))
        for i in range(1, clusters + 1)
    ]
    links = []
    for i in range(clusters):
        for j in range(i + 1, clusters):
            if i // SITE == j // SITE:
                latency, bandwidth = SAME_SITE
            elif i // REGION == j // REGION:
                latency, bandwidth = SAME_REGION
            else:
                latency, bandwidth = ACROSS_REGIONS
            pair = (specs[i].name, specs[j].name)
            links.append(Link(clusters=pair, latency_s=latency, bandwidth_bps=bandwidth))
    return PlatformSpec(start=start, cluster=tuple(specs), link=tuple(links))


def infos(platform: PlatformSpec) -> dict[str, ClusterInfo]:
    """What launchers see of each cluster (CINFO), by name."""
    return {spec.name: spec.info() for spec in platform.clusters}


def interconnect(platform: PlatformSpec) -> Interconnect:
    """ICINFO, as the mock adapter reports it."""
    return Interconnect(links=platform.links)
