//! smoltcp underneath NVMe/TCP: media (TAP, an in-process wire), decorators
//! (impairments, pcap capture) and a stack with its poll loop.
