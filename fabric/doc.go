// Package fabric holds what ctxmemd needs of the network fabric that
// reaches the shared CMX pools (G3.5): today, watching the link state of
// the interface that reaches them (DESIGN.md "Fabric (G3.5)": link down puts
// G3.5 into bypass, link up re-admits it). NVMe-oF attach and the
// shared-pool extent layout come with the G3.5 work.
// NVMe-oF: Target/Attacher (nvmeof.go) connect and disconnect through the kernel initiator, Discover (sysfs.go) finds attached namespaces, RouteTo (route.go) names the interface reaching a target.
package fabric
