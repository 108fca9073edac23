//! The real [`Net`]: rtnetlink requests (RTM_GETLINK, RTM_GETQDISC/NEWQDISC/DELQDISC, RTM_NEWTCLASS) over a
//! blocking netlink socket, with the message types of `netlink-packet-route` and the socket of
//! `netlink-sys` — the crates `rtnetlink` is built on, without its async runtime: joule sends
//! one request at a time from a synchronous loop. A netlink socket belongs to the network
//! namespace it was created in, so for another namespace the socket is opened by a short-lived
//! thread that enters that namespace first; no thread of the agent ever changes namespace.

use super::net::{no_link, Net, Qdisc, QdiscOption};
use super::RealEffects;
use netlink_packet_core::{
    DefaultNla, Emitable, NetlinkHeader, NetlinkMessage, NetlinkPayload, Nla, NlasIterator, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REPLACE,
    NLM_F_REQUEST,
};
use netlink_packet_route::link::{InfoKind, LinkAttribute, LinkFlags, LinkInfo, LinkMessage};
use netlink_packet_route::tc::{TcAttribute, TcMessage, TcOption};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use std::io;
use std::path::Path;

/// `TCA_OPTIONS`: the attribute holding a qdisc's own parameters.
const TCA_OPTIONS: u16 = 2;
/// Qdisc kinds whose options `netlink-packet-route` (0.34, `tc/options.rs`) parses into its
/// own types; the options of every other kind arrive as one undecoded `TCA_OPTIONS`
/// attribute. `options_the_crate_parses_itself_come_back_the_same` fails if that changes.
const PARSED_BY_CRATE: &[&str] = &["fq_codel", "ingress"];

/// One rtnetlink socket in one network namespace.
struct Rtnl {
    sock: Socket,
    seq: u32,
}

fn socket() -> io::Result<Socket> {
    let mut sock = Socket::new(NETLINK_ROUTE)?;
    sock.bind_auto()?;
    sock.connect(&SocketAddr::new(0, 0))?;
    Ok(sock)
}

impl Rtnl {
    fn open(netns: Option<&Path>) -> io::Result<Rtnl> {
        let sock = match netns {
            None => socket()?,
            Some(path) => {
                let ns = std::fs::File::open(path)?;
                let enter_and_open = || -> io::Result<Socket> {
                    nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)?;
                    socket()
                };
                std::thread::scope(|s| s.spawn(enter_and_open).join()).map_err(|_| io::Error::other("the netns thread panicked"))??
            }
        };
        Ok(Rtnl { sock, seq: 0 })
    }

    /// Sends `msg` and collects the replies: a dump's messages until NLMSG_DONE, or for any
    /// other request what comes before its acknowledgement. A negative errno from the kernel
    /// becomes that `io::Error`; a reply that does not decode is kept, undecoded, for the
    /// caller to judge.
    fn request(&mut self, msg: RouteNetlinkMessage, flags: u16) -> io::Result<Vec<Result<RouteNetlinkMessage, Undecodable>>> {
        let dump = flags & NLM_F_DUMP == NLM_F_DUMP;
        self.seq += 1;
        let mut packet = NetlinkMessage::new(NetlinkHeader::default(), NetlinkPayload::from(msg));
        packet.header.flags = NLM_F_REQUEST | flags | if dump { 0 } else { NLM_F_ACK };
        packet.header.sequence_number = self.seq;
        packet.finalize();
        let mut buf = vec![0; packet.buffer_len()];
        packet.serialize(&mut buf);
        self.sock.send(&buf, 0)?;
        let mut out = Vec::new();
        loop {
            let (datagram, _) = self.sock.recv_from_full()?;
            let mut at = 0;
            while at + 16 <= datagram.len() {
                let raw = &datagram[at..];
                let len = u32::from_ne_bytes(raw[0..4].try_into().unwrap()) as usize;
                let seq = u32::from_ne_bytes(raw[8..12].try_into().unwrap());
                if len < 16 || len > raw.len() {
                    return Err(invalid(format!("netlink message of length {len} in a datagram of {}", raw.len())));
                }
                at += len.next_multiple_of(4);
                if seq != self.seq {
                    continue;
                }
                let m = match NetlinkMessage::<RouteNetlinkMessage>::deserialize(&raw[..len]) {
                    Ok(m) => m,
                    Err(e) => {
                        out.push(Err(Undecodable { raw: raw[..len].to_vec(), reason: e.to_string() }));
                        continue;
                    }
                };
                match m.payload {
                    NetlinkPayload::Done(d) if d.code < 0 => return Err(io::Error::from_raw_os_error(-d.code)),
                    NetlinkPayload::Done(_) => return Ok(out),
                    NetlinkPayload::Error(e) => {
                        return match e.code {
                            None => Ok(out),
                            Some(code) => Err(io::Error::from_raw_os_error(-code.get())),
                        }
                    }
                    NetlinkPayload::InnerMessage(inner) => out.push(Ok(inner)),
                    _ => {}
                }
            }
        }
    }
}

/// A reply `netlink-packet-route` could not decode (a qdisc kind whose attributes it gets
/// wrong); kept whole so a dump can tell which interface it was about.
struct Undecodable {
    raw: Vec<u8>,
    reason: String,
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

fn value_of(nla: &impl Nla) -> Vec<u8> {
    let mut v = vec![0; nla.value_len()];
    nla.emit_value(&mut v);
    v
}

/// The `TCA_OPTIONS` payload of a listed qdisc, as bytes again.
fn options_payload(kind: &str, opts: &[TcOption]) -> Vec<u8> {
    match opts {
        [TcOption::Other(whole)] if !PARSED_BY_CRATE.contains(&kind) && whole.kind() == TCA_OPTIONS => value_of(whole),
        _ => {
            let mut b = vec![0; opts.buffer_len()];
            opts.emit(&mut b);
            b
        }
    }
}

/// Splits a `TCA_OPTIONS` payload into its attributes. Some qdiscs (pfifo, sfq, pfifo_fast)
/// put a plain C struct there instead: a payload that is not exactly a list of attributes
/// comes back as one option of kind 0 (no qdisc has an attribute 0), and goes out as such.
fn split_options(payload: &[u8]) -> Vec<QdiscOption> {
    let raw = || vec![QdiscOption { kind: 0, value: payload.to_vec() }];
    let mut out = Vec::new();
    for nla in NlasIterator::new(payload) {
        match nla {
            Ok(nla) if nla.length() >= 4 && nla.kind() != 0 => out.push(QdiscOption { kind: nla.kind(), value: nla.value().to_vec() }),
            _ => return raw(),
        }
    }
    out
}

fn tc_message(ifindex: u32, parent: u32, handle: u32, attributes: Vec<TcAttribute>) -> io::Result<TcMessage> {
    let mut m = TcMessage::default();
    m.header.index = i32::try_from(ifindex).map_err(|_| invalid(format!("ifindex {ifindex} out of range")))?;
    m.header.parent = parent.into();
    m.header.handle = handle.into();
    m.attributes = attributes;
    Ok(m)
}

fn to_qdisc(m: TcMessage) -> Qdisc {
    let kind = m.attributes.iter().find_map(|a| if let TcAttribute::Kind(k) = a { Some(k.clone()) } else { None }).unwrap_or_default();
    let options = m.attributes.iter().find_map(|a| match a {
        TcAttribute::Options(o) => Some(split_options(&options_payload(&kind, o))),
        _ => None,
    });
    Qdisc { handle: m.header.handle.into(), parent: m.header.parent.into(), options: options.unwrap_or_default(), kind }
}

fn to_attributes(q: &Qdisc) -> Vec<TcAttribute> {
    let mut attrs = vec![TcAttribute::Kind(q.kind.clone())];
    match q.options.as_slice() {
        [] => {}
        [raw] if raw.kind == 0 => attrs.push(TcAttribute::Other(DefaultNla::new(TCA_OPTIONS, raw.value.clone()))),
        opts => attrs.push(TcAttribute::Options(opts.iter().map(|o| TcOption::Other(DefaultNla::new(o.kind, o.value.clone()))).collect())),
    }
    attrs
}

/// The ifindex a (possibly undecodable) RTM_NEWQDISC reply is about: `tcmsg.tcm_ifindex`,
/// right after the 16-byte netlink header and 4 bytes of family and padding.
fn raw_ifindex(raw: &[u8]) -> Option<u32> {
    Some(i32::from_ne_bytes(raw.get(20..24)?.try_into().ok()?) as u32)
}

impl Net for RealEffects {
    fn link_index(&self, netns: Option<&Path>, ifname: &str) -> io::Result<u32> {
        Ok(get_link(netns, ifname)?.header.index)
    }

    fn qdiscs(&self, netns: Option<&Path>, ifindex: u32) -> io::Result<Vec<Qdisc>> {
        let ask = RouteNetlinkMessage::GetQueueDiscipline(tc_message(ifindex, 0, 0, Vec::new())?);
        let mut mine = Vec::new();
        // The dump covers every interface: a reply about another one that does not decode
        // must not hide this one's, and one about this one must not be dropped silently.
        for reply in Rtnl::open(netns)?.request(ask, NLM_F_DUMP)? {
            match reply {
                Ok(RouteNetlinkMessage::NewQueueDiscipline(m)) if m.header.index as u32 == ifindex => mine.push(to_qdisc(m)),
                Err(u) if raw_ifindex(&u.raw) == Some(ifindex) => return Err(invalid(format!("a qdisc of interface {ifindex} did not decode: {}", u.reason))),
                _ => {}
            }
        }
        if mine.is_empty() {
            // Every interface has a root qdisc (noop while down): none means no such interface.
            return Err(no_link(netns, ifindex));
        }
        Ok(mine)
    }

    fn replace_qdisc(&self, netns: Option<&Path>, ifindex: u32, q: &Qdisc) -> io::Result<()> {
        let msg = tc_message(ifindex, q.parent, q.handle, to_attributes(q))?;
        ack(netns, ifindex, RouteNetlinkMessage::NewQueueDiscipline(msg), NLM_F_CREATE | NLM_F_REPLACE).map_err(|e| match e.raw_os_error() {
            // The kernel says ENOENT both for a qdisc it was built without and for a missing parent.
            Some(libc::ENOENT) => io::Error::new(
                io::ErrorKind::NotFound,
                format!("qdisc {} at parent {:x}: this kernel has no such qdisc (CONFIG_NET_SCH_*), or no such parent", q.kind, q.parent),
            ),
            _ => e,
        })
    }

    fn delete_qdisc(&self, netns: Option<&Path>, ifindex: u32, parent: u32, handle: u32) -> io::Result<()> {
        let msg = tc_message(ifindex, parent, handle, Vec::new())?;
        ack(netns, ifindex, RouteNetlinkMessage::DelQueueDiscipline(msg), 0)
    }

    fn replace_class(&self, netns: Option<&Path>, ifindex: u32, c: &Qdisc) -> io::Result<()> {
        let msg = tc_message(ifindex, c.parent, c.handle, to_attributes(c))?;
        ack(netns, ifindex, RouteNetlinkMessage::NewTrafficClass(msg), NLM_F_CREATE | NLM_F_REPLACE)
    }

    fn link_kind(&self, netns: Option<&Path>, ifname: &str) -> io::Result<String> {
        let l = get_link(netns, ifname)?;
        let kind = l.attributes.iter().find_map(|a| match a {
            LinkAttribute::LinkInfo(infos) => infos.iter().find_map(|i| if let LinkInfo::Kind(k) = i { Some(k.to_string()) } else { None }),
            _ => None,
        });
        Ok(kind.unwrap_or_default())
    }

    fn add_link(&self, netns: Option<&Path>, ifname: &str, kind: &str) -> io::Result<u32> {
        let mut m = LinkMessage::default();
        m.header.flags = LinkFlags::Up;
        m.header.change_mask = LinkFlags::Up;
        m.attributes.push(LinkAttribute::IfName(ifname.to_string()));
        m.attributes.push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(InfoKind::from(kind))]));
        Rtnl::open(netns)?.request(RouteNetlinkMessage::NewLink(m), NLM_F_CREATE | NLM_F_EXCL)?;
        self.link_index(netns, ifname)
    }

    fn delete_link(&self, netns: Option<&Path>, ifname: &str) -> io::Result<()> {
        let ifindex = self.link_index(netns, ifname)?;
        let mut m = LinkMessage::default();
        m.header.index = ifindex;
        ack(netns, ifindex, RouteNetlinkMessage::DelLink(m), 0)
    }
}

/// RTM_GETLINK of interface `ifname`: `NotFound` when `netns` has none of that name.
fn get_link(netns: Option<&Path>, ifname: &str) -> io::Result<LinkMessage> {
    let mut ask = LinkMessage::default();
    ask.attributes.push(LinkAttribute::IfName(ifname.to_string()));
    let replies = Rtnl::open(netns)?.request(RouteNetlinkMessage::GetLink(ask), 0).map_err(|e| match e.raw_os_error() {
        Some(libc::ENODEV) => no_link(netns, ifname),
        _ => e,
    })?;
    for reply in replies {
        match reply {
            Ok(RouteNetlinkMessage::NewLink(l)) => return Ok(l),
            Err(u) => return Err(invalid(format!("the reply about interface {ifname} did not decode: {}", u.reason))),
            Ok(_) => {}
        }
    }
    Err(no_link(netns, ifname))
}

/// A request answered by an acknowledgement; ENODEV (no such ifindex) becomes `NotFound`.
fn ack(netns: Option<&Path>, ifindex: u32, msg: RouteNetlinkMessage, flags: u16) -> io::Result<()> {
    match Rtnl::open(netns)?.request(msg, flags) {
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => Err(no_link(netns, ifindex)),
        r => r.map(drop),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::effects::{tc_handle, TC_H_ROOT};

    /// What `replace_qdisc` sends and what `qdiscs` makes of the kernel's echo of it agree,
    /// through the crate's own encoding and decoding (no kernel needed).
    fn round_trip(q: &Qdisc) -> Qdisc {
        let sent = tc_message(3, q.parent, q.handle, to_attributes(q)).unwrap();
        let mut packet = NetlinkMessage::new(NetlinkHeader::default(), NetlinkPayload::from(RouteNetlinkMessage::NewQueueDiscipline(sent)));
        packet.finalize();
        let mut buf = vec![0; packet.buffer_len()];
        packet.serialize(&mut buf);
        assert_eq!(raw_ifindex(&buf), Some(3));
        match NetlinkMessage::<RouteNetlinkMessage>::deserialize(&buf).unwrap().payload {
            NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewQueueDiscipline(m)) => to_qdisc(m),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn nested_options_survive_encoding_and_decoding() {
        // fq: TCA_FQ_PLIMIT (1) = 4321 packets, TCA_FQ_FLOW_PLIMIT (2) = 50.
        let fq = Qdisc::new("fq", tc_handle(0x4a, 0), TC_H_ROOT).with_option(QdiscOption::u32(1, 4321)).with_option(QdiscOption::u32(2, 50));
        assert_eq!(round_trip(&fq), fq);
    }

    #[test]
    fn options_the_crate_parses_itself_come_back_the_same() {
        // fq_codel: TCA_FQ_CODEL_LIMIT (2) = 1000.
        let q = Qdisc::new("fq_codel", tc_handle(1, 0), TC_H_ROOT).with_option(QdiscOption::u32(2, 1000));
        assert_eq!(round_trip(&q), q);
    }

    #[test]
    fn a_struct_payload_is_one_raw_option() {
        // pfifo: struct tc_fifo_qopt { __u32 limit; } = 3 packets; three bytes of a u32 are not an attribute.
        let pfifo = Qdisc::new("pfifo", tc_handle(2, 0), TC_H_ROOT).with_option(QdiscOption { kind: 0, value: 3u32.to_ne_bytes().to_vec() });
        assert_eq!(round_trip(&pfifo), pfifo);
        assert_eq!(split_options(&[]), vec![]);
    }
}
